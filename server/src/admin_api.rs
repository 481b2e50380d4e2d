//! `/v1/admin/*`: the admin REST API. Handlers authenticate the admin or operator key, then
//! call [`AdminService`], which authorises, changes, audits and announces.

use app::keys::KeyKind;
use app::rules::RuleBody;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;

use crate::auth::Authenticator;
use crate::error::{ApiError, AppJson};
use crate::service::{Actor, AdminService, KeyBody, RotateBody};
use crate::startup::AppState;

/// The admin routes.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/admin/tenants", get(list_tenants).post(create_tenant))
        .route("/v1/admin/tenants/{tenant}", get(get_tenant))
        .route("/v1/admin/tenants/{tenant}/suspend", post(suspend))
        .route("/v1/admin/tenants/{tenant}/resume", post(resume))
        .route(
            "/v1/admin/tenants/{tenant}/rules",
            get(list_rules).post(create_rule),
        )
        .route(
            "/v1/admin/tenants/{tenant}/rules/{id}",
            get(get_rule).put(update_rule).delete(delete_rule),
        )
        .route(
            "/v1/admin/tenants/{tenant}/keys",
            get(list_keys).post(create_key),
        )
        .route(
            "/v1/admin/tenants/{tenant}/keys/{id}/rotate",
            post(rotate_key),
        )
        .route(
            "/v1/admin/tenants/{tenant}/keys/{id}/revoke",
            post(revoke_key),
        )
        .route("/v1/admin/tenants/{tenant}/audit", get(tenant_audit))
        .route("/v1/admin/audit", get(platform_audit))
}

/// The acting admin or operator, from the request's key.
async fn actor(auth: &Authenticator, headers: &HeaderMap) -> Result<Actor, ApiError> {
    let key = auth.key(headers).await?;
    let label = format!("key:{}", key.prefix);
    match (key.kind, key.tenant_id) {
        (Some(KeyKind::Operator), _) => Ok(Actor::Operator { label }),
        (Some(KeyKind::Admin), Some(tenant_id)) => Ok(Actor::TenantAdmin { tenant_id, label }),
        (Some(KeyKind::Check), _) => Err(ApiError::Forbidden(
            "check keys work only on /v1/check; use an admin key for /v1/admin".into(),
        )),
        _ => Err(ApiError::Unauthorized),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TenantBody {
    name: String,
}

async fn list_tenants(
    State(auth): State<Authenticator>,
    State(svc): State<AdminService>,
    headers: HeaderMap,
) -> Result<impl IntoResponse, ApiError> {
    let actor = actor(&auth, &headers).await?;
    Ok(Json(svc.list_tenants(&actor).await?))
}

async fn create_tenant(
    State(auth): State<Authenticator>,
    State(svc): State<AdminService>,
    headers: HeaderMap,
    AppJson(body): AppJson<TenantBody>,
) -> Result<impl IntoResponse, ApiError> {
    let actor = actor(&auth, &headers).await?;
    Ok((
        StatusCode::CREATED,
        Json(svc.create_tenant(&actor, &body.name).await?),
    ))
}

async fn get_tenant(
    State(auth): State<Authenticator>,
    State(svc): State<AdminService>,
    headers: HeaderMap,
    Path(tenant): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let actor = actor(&auth, &headers).await?;
    Ok(Json(svc.get_tenant(&actor, &tenant).await?))
}

async fn suspend(
    State(auth): State<Authenticator>,
    State(svc): State<AdminService>,
    headers: HeaderMap,
    Path(tenant): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let actor = actor(&auth, &headers).await?;
    Ok(Json(svc.set_tenant_active(&actor, &tenant, false).await?))
}

async fn resume(
    State(auth): State<Authenticator>,
    State(svc): State<AdminService>,
    headers: HeaderMap,
    Path(tenant): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let actor = actor(&auth, &headers).await?;
    Ok(Json(svc.set_tenant_active(&actor, &tenant, true).await?))
}

async fn list_rules(
    State(auth): State<Authenticator>,
    State(svc): State<AdminService>,
    headers: HeaderMap,
    Path(tenant): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let actor = actor(&auth, &headers).await?;
    Ok(Json(svc.list_rules(&actor, &tenant).await?))
}

async fn create_rule(
    State(auth): State<Authenticator>,
    State(svc): State<AdminService>,
    headers: HeaderMap,
    Path(tenant): Path<String>,
    AppJson(body): AppJson<RuleBody>,
) -> Result<impl IntoResponse, ApiError> {
    let actor = actor(&auth, &headers).await?;
    Ok((
        StatusCode::CREATED,
        Json(svc.create_rule(&actor, &tenant, &body).await?),
    ))
}

async fn get_rule(
    State(auth): State<Authenticator>,
    State(svc): State<AdminService>,
    headers: HeaderMap,
    Path((tenant, id)): Path<(String, String)>,
) -> Result<impl IntoResponse, ApiError> {
    let actor = actor(&auth, &headers).await?;
    Ok(Json(svc.get_rule(&actor, &tenant, &id).await?))
}

async fn update_rule(
    State(auth): State<Authenticator>,
    State(svc): State<AdminService>,
    headers: HeaderMap,
    Path((tenant, id)): Path<(String, String)>,
    AppJson(body): AppJson<RuleBody>,
) -> Result<impl IntoResponse, ApiError> {
    let actor = actor(&auth, &headers).await?;
    Ok(Json(svc.update_rule(&actor, &tenant, &id, &body).await?))
}

async fn delete_rule(
    State(auth): State<Authenticator>,
    State(svc): State<AdminService>,
    headers: HeaderMap,
    Path((tenant, id)): Path<(String, String)>,
) -> Result<impl IntoResponse, ApiError> {
    let actor = actor(&auth, &headers).await?;
    svc.delete_rule(&actor, &tenant, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn list_keys(
    State(auth): State<Authenticator>,
    State(svc): State<AdminService>,
    headers: HeaderMap,
    Path(tenant): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let actor = actor(&auth, &headers).await?;
    Ok(Json(svc.list_keys(&actor, &tenant).await?))
}

async fn create_key(
    State(auth): State<Authenticator>,
    State(svc): State<AdminService>,
    headers: HeaderMap,
    Path(tenant): Path<String>,
    AppJson(body): AppJson<KeyBody>,
) -> Result<impl IntoResponse, ApiError> {
    let actor = actor(&auth, &headers).await?;
    Ok((
        StatusCode::CREATED,
        Json(svc.create_key(&actor, &tenant, &body).await?),
    ))
}

async fn rotate_key(
    State(auth): State<Authenticator>,
    State(svc): State<AdminService>,
    headers: HeaderMap,
    Path((tenant, id)): Path<(String, String)>,
    AppJson(body): AppJson<RotateBody>,
) -> Result<impl IntoResponse, ApiError> {
    let actor = actor(&auth, &headers).await?;
    Ok((
        StatusCode::CREATED,
        Json(svc.rotate_key(&actor, &tenant, &id, &body).await?),
    ))
}

async fn revoke_key(
    State(auth): State<Authenticator>,
    State(svc): State<AdminService>,
    headers: HeaderMap,
    Path((tenant, id)): Path<(String, String)>,
) -> Result<impl IntoResponse, ApiError> {
    let actor = actor(&auth, &headers).await?;
    Ok(Json(svc.revoke_key(&actor, &tenant, &id).await?))
}

async fn tenant_audit(
    State(auth): State<Authenticator>,
    State(svc): State<AdminService>,
    headers: HeaderMap,
    Path(tenant): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let actor = actor(&auth, &headers).await?;
    Ok(Json(svc.audit_events(&actor, Some(&tenant)).await?))
}

async fn platform_audit(
    State(auth): State<Authenticator>,
    State(svc): State<AdminService>,
    headers: HeaderMap,
) -> Result<impl IntoResponse, ApiError> {
    let actor = actor(&auth, &headers).await?;
    Ok(Json(svc.audit_events(&actor, None).await?))
}
