//! The HTTP error boundary. Every error leaves as `application/problem+json` (RFC 9457).
//! Store and Redis errors become opaque 500/503 answers; their cause chain is logged, never
//! sent to the client.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::admin::ServiceError;
use crate::decide::DecideError;
use crate::limiter::LimiterError;
use crate::store::StoreError;

/// An error answered by the HTTP API.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    BadRequest(String),
    #[error("a valid API key is required")]
    Unauthorized,
    #[error("{0}")]
    Forbidden(String),
    #[error("not found")]
    NotFound,
    /// Not found, saying what was looked for and what to do.
    #[error("{0}")]
    Absent(String),
    #[error("{0}")]
    Conflict(String),
    /// Input that fails validation, field by field.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Invalid(Vec<app::rules::FieldError>),
    /// The limiter could not decide and a rule fails closed.
    #[error("{0}")]
    Undecided(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Limiter(#[from] LimiterError),
    /// A bug or an unexpected failure, already logged.
    #[error("internal error; see the server log")]
    Internal,
}

/// The problem+json body.
#[derive(Debug, Serialize)]
pub struct Problem {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub title: &'static str,
    pub status: u16,
    pub detail: String,
    /// Per-field validation errors, when the input was invalid.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<app::rules::FieldError>,
}

impl ApiError {
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) | ApiError::Invalid(_) => StatusCode::BAD_REQUEST,
            ApiError::Undecided(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound | ApiError::Absent(_) => StatusCode::NOT_FOUND,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::Store(StoreError::Conflict(_)) => StatusCode::CONFLICT,
            ApiError::Limiter(LimiterError::OverQuota { .. }) => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Store(e) if e.is_transient() => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Limiter(e) if e.is_transient() => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Store(_) | ApiError::Limiter(_) | ApiError::Internal => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
        }
    }

    fn problem(&self) -> Problem {
        let status = self.status();
        let (kind, title) = match status {
            StatusCode::BAD_REQUEST => ("/problems/bad-request", "Bad request"),
            StatusCode::UNAUTHORIZED => ("/problems/unauthorized", "Unauthorized"),
            StatusCode::FORBIDDEN => ("/problems/forbidden", "Forbidden"),
            StatusCode::NOT_FOUND => ("/problems/not-found", "Not found"),
            StatusCode::CONFLICT => ("/problems/conflict", "Conflict"),
            StatusCode::TOO_MANY_REQUESTS => ("/problems/over-quota", "Over quota"),
            StatusCode::SERVICE_UNAVAILABLE => ("/problems/unavailable", "Service unavailable"),
            _ => ("/problems/internal", "Internal error"),
        };
        let detail = match self {
            ApiError::Store(StoreError::Conflict(what)) => format!("{what} already exists"),
            ApiError::Limiter(quota @ LimiterError::OverQuota { .. }) => quota.to_string(),
            ApiError::Store(_) | ApiError::Limiter(_)
                if status == StatusCode::SERVICE_UNAVAILABLE =>
            {
                "a backing service is unavailable; retry later".to_owned()
            }
            ApiError::Store(_) | ApiError::Limiter(_) => {
                "internal error; see the server log".to_owned()
            }
            other => other.to_string(),
        };
        let errors = match self {
            ApiError::Invalid(errors) => errors.clone(),
            _ => Vec::new(),
        };
        Problem {
            kind,
            title,
            status: status.as_u16(),
            detail,
            errors,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if matches!(self, ApiError::Store(_) | ApiError::Limiter(_)) {
            tracing::error!(error = ?self, "request failed");
        }
        let problem = self.problem();
        let body = serde_json::to_vec(&problem).unwrap_or_default();
        let mut response = (
            self.status(),
            [(header::CONTENT_TYPE, "application/problem+json")],
            body,
        )
            .into_response();
        if let ApiError::Limiter(LimiterError::OverQuota { retry_after_ms, .. }) = self {
            response.headers_mut().insert(
                header::RETRY_AFTER,
                retry_after_ms.div_ceil(1000).max(1).into(),
            );
        }
        response
    }
}

impl From<DecideError> for ApiError {
    fn from(e: DecideError) -> Self {
        match e {
            DecideError::Unauthorized => ApiError::Unauthorized,
            DecideError::Forbidden(m) => ApiError::Forbidden(m),
            DecideError::Input(e) => ApiError::BadRequest(e.message),
            DecideError::Undecided(m) => ApiError::Undecided(m),
            DecideError::Store(e) => ApiError::Store(e),
            DecideError::Limiter(e) => ApiError::Limiter(e),
        }
    }
}

impl From<ServiceError> for ApiError {
    fn from(e: ServiceError) -> Self {
        match e {
            ServiceError::NotFound(_) => ApiError::NotFound,
            ServiceError::Forbidden(m) => ApiError::Forbidden(m),
            ServiceError::Invalid(fields) => ApiError::Invalid(fields),
            ServiceError::Conflict(m) => ApiError::Conflict(m),
            ServiceError::Store(StoreError::Conflict(what)) => {
                ApiError::Conflict(format!("{what} already exists"))
            }
            ServiceError::Store(e) => ApiError::Store(e),
            ServiceError::Limiter(e) => ApiError::Limiter(e),
            ServiceError::Internal(m) => {
                tracing::error!(error = %m, "admin operation failed");
                ApiError::Internal
            }
        }
    }
}

/// A JSON body extractor whose rejections are problem+json 400s.
#[derive(Debug)]
pub struct AppJson<T>(pub T);

impl<S, T> axum::extract::FromRequest<S> for AppJson<T>
where
    axum::Json<T>:
        axum::extract::FromRequest<S, Rejection = axum::extract::rejection::JsonRejection>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, Self::Rejection> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(value)) => Ok(AppJson(value)),
            Err(rejection) => Err(ApiError::BadRequest(rejection.body_text())),
        }
    }
}
