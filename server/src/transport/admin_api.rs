//! `/v1/admin/*`: the admin REST API. Handlers find the admin or operator key and turn it into
//! an [`Actor`], then call the admin service ([`crate::admin`]), which decides every
//! authorisation (tenant access, suspension, role), changes, audits and announces. The JSON
//! they send is the service's DTOs, the same the console gets.

use app::audit::AuditFilter;
use app::keys::KeyKind;
use app::rules::{OverrideBody, RuleBody};
use app::simulate::{ResetInput, SimulateInput};
use axum::extract::rejection::QueryRejection;
use axum::extract::{FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;

use super::credentials::presented_key;
use super::error::{ApiError, AppJson};
use super::state::AppState;
use crate::admin::keys::{KeyBody, RotateBody};
use crate::admin::quotas::QuotasBody;
use crate::admin::rule_files::{read_rules_file, write_rules_file, FileFormat, RuleSet};
use crate::admin::top_denied::{TopRange, DEFAULT_SUBJECTS, MAX_SUBJECTS};
use crate::admin::Actor;

/// The admin routes.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/admin/tenants", get(list_tenants).post(create_tenant))
        .route("/v1/admin/tenants/{tenant}", get(get_tenant))
        .route("/v1/admin/tenants/{tenant}/suspend", post(suspend))
        .route("/v1/admin/tenants/{tenant}/resume", post(resume))
        .route(
            "/v1/admin/tenants/{tenant}/quotas",
            get(get_quotas).put(set_quotas),
        )
        .route(
            "/v1/admin/tenants/{tenant}/rules",
            get(list_rules).post(create_rule),
        )
        .route("/v1/admin/tenants/{tenant}/rules/export", get(export_rules))
        .route(
            "/v1/admin/tenants/{tenant}/rules/import",
            post(import_rules),
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
        .route(
            "/v1/admin/tenants/{tenant}/rules/{id}/reset",
            post(reset_bucket),
        )
        .route(
            "/v1/admin/tenants/{tenant}/rules/{id}/overrides",
            get(list_overrides).post(set_override),
        )
        .route(
            "/v1/admin/tenants/{tenant}/rules/{id}/overrides/{override_id}",
            axum::routing::delete(delete_override),
        )
        .route("/v1/admin/tenants/{tenant}/simulate", post(simulate))
        .route("/v1/admin/tenants/{tenant}/audit", get(tenant_audit))
        .route("/v1/admin/tenants/{tenant}/top-denied", get(top_denied))
        .route("/v1/admin/audit", get(platform_audit))
        .route(
            "/v1/admin/tenants/{tenant}/users",
            get(list_tenant_admins).post(add_tenant_admin),
        )
        .route("/v1/admin/users", get(list_users))
        .route("/v1/admin/users/{id}", axum::routing::delete(delete_user))
        .route(
            "/v1/admin/users/{id}/sessions",
            get(list_user_sessions).delete(end_user_sessions),
        )
        .route("/v1/admin/users/{id}/disable", post(disable_user))
        .route("/v1/admin/users/{id}/enable", post(enable_user))
        .route(
            "/v1/admin/users/{id}/reset-password",
            post(reset_user_password),
        )
        .route("/v1/admin/operator-keys", get(list_operator_keys))
        .route(
            "/v1/admin/operator-keys/{id}/rotate",
            post(rotate_operator_key),
        )
        .route(
            "/v1/admin/operator-keys/{id}/revoke",
            post(revoke_operator_key),
        )
}

/// The acting admin or operator, from the request's key: an extractor, so every handler
/// starts authenticated.
#[derive(Debug)]
struct Acting(Actor);

impl FromRequestParts<AppState> for Acting {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let key = state.identities.key(presented_key(&parts.headers)).await?;
        // The key's id makes the actor unique: display prefixes are only a few characters,
        // so another key could be made to share one.
        let label = format!("key:{} ({})", key.id, key.prefix);
        match (key.kind, key.tenant_id.clone()) {
            (Some(KeyKind::Operator), _) => Ok(Acting(Actor::Operator { label })),
            (Some(KeyKind::Admin), Some(tenant_id)) => {
                Ok(Acting(Actor::TenantAdmin { tenant_id, label }))
            }
            (Some(KeyKind::Check), _) => Err(ApiError::Forbidden(
                "check keys work only on /v1/check; use an admin key for /v1/admin".into(),
            )),
            _ => Err(ApiError::Unauthorized),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TenantBody {
    name: String,
}

async fn list_tenants(
    State(state): State<AppState>,
    Acting(actor): Acting,
) -> Result<impl IntoResponse, ApiError> {
    Ok(Json(state.admin.list_tenants(&actor).await?))
}

async fn create_tenant(
    State(state): State<AppState>,
    Acting(actor): Acting,
    AppJson(body): AppJson<TenantBody>,
) -> Result<impl IntoResponse, ApiError> {
    Ok((
        StatusCode::CREATED,
        Json(state.admin.create_tenant(&actor, &body.name).await?),
    ))
}

async fn get_tenant(
    State(state): State<AppState>,
    Acting(actor): Acting,
    Path(tenant): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    Ok(Json(state.admin.get_tenant(&actor, &tenant).await?))
}

async fn suspend(
    State(state): State<AppState>,
    Acting(actor): Acting,
    Path(tenant): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    Ok(Json(
        state
            .admin
            .set_tenant_active(&actor, &tenant, false)
            .await?,
    ))
}

async fn resume(
    State(state): State<AppState>,
    Acting(actor): Acting,
    Path(tenant): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    Ok(Json(
        state.admin.set_tenant_active(&actor, &tenant, true).await?,
    ))
}

async fn list_rules(
    State(state): State<AppState>,
    Acting(actor): Acting,
    Path(tenant): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    Ok(Json(state.admin.list_rules(&actor, &tenant).await?))
}

async fn create_rule(
    State(state): State<AppState>,
    Acting(actor): Acting,
    Path(tenant): Path<String>,
    AppJson(body): AppJson<RuleBody>,
) -> Result<impl IntoResponse, ApiError> {
    Ok((
        StatusCode::CREATED,
        Json(state.admin.create_rule(&actor, &tenant, &body).await?),
    ))
}

async fn get_rule(
    State(state): State<AppState>,
    Acting(actor): Acting,
    Path((tenant, id)): Path<(String, String)>,
) -> Result<impl IntoResponse, ApiError> {
    Ok(Json(state.admin.get_rule(&actor, &tenant, &id).await?))
}

async fn update_rule(
    State(state): State<AppState>,
    Acting(actor): Acting,
    Path((tenant, id)): Path<(String, String)>,
    AppJson(body): AppJson<RuleBody>,
) -> Result<impl IntoResponse, ApiError> {
    Ok(Json(
        state.admin.update_rule(&actor, &tenant, &id, &body).await?,
    ))
}

async fn delete_rule(
    State(state): State<AppState>,
    Acting(actor): Acting,
    Path((tenant, id)): Path<(String, String)>,
) -> Result<impl IntoResponse, ApiError> {
    state.admin.delete_rule(&actor, &tenant, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TopDeniedQuery {
    #[serde(default)]
    range: TopRange,
    limit: Option<usize>,
}

/// The tenant's most denied subjects by rule over `?range=5m` (the default) or `1h`, at most
/// `?limit=` (1 to 100, 10 by default) a rule.
async fn top_denied(
    State(state): State<AppState>,
    Acting(actor): Acting,
    Path(tenant): Path<String>,
    query: Result<Query<TopDeniedQuery>, QueryRejection>,
) -> Result<impl IntoResponse, ApiError> {
    let Query(query) = query.map_err(|e| {
        ApiError::BadRequest(format!(
            "{}; `range` is 5m or 1h and `limit` a whole number from 1 to {MAX_SUBJECTS}",
            e.body_text()
        ))
    })?;
    let limit = query.limit.unwrap_or(DEFAULT_SUBJECTS);
    if !(1..=MAX_SUBJECTS).contains(&limit) {
        return Err(ApiError::BadRequest(format!(
            "`limit` is a whole number from 1 to {MAX_SUBJECTS}, not {limit}"
        )));
    }
    Ok(Json(
        state
            .admin
            .top_denied(&actor, &tenant, query.range, limit, &state.dashboard)
            .await?,
    ))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExportQuery {
    #[serde(default)]
    format: FileFormat,
}

/// The tenant's rules as a file: JSON, or YAML with `?format=yaml`.
async fn export_rules(
    State(state): State<AppState>,
    Acting(actor): Acting,
    Path(tenant): Path<String>,
    query: Result<Query<ExportQuery>, QueryRejection>,
) -> Result<impl IntoResponse, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let file = state.admin.export_rules(&actor, &tenant).await?;
    let content_type = match query.format {
        FileFormat::Json => "application/json",
        FileFormat::Yaml => "application/yaml",
    };
    Ok((
        [(axum::http::header::CONTENT_TYPE, content_type)],
        write_rules_file(&file, query.format),
    ))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ImportQuery {
    #[serde(default)]
    dry_run: bool,
    /// A dry run's fingerprint: apply only if the plan is still that one.
    expect: Option<String>,
}

/// A rules file (JSON, or YAML with a YAML content type) as a plan over every rule of the
/// tenant: with `?dry_run=true` the plan with its problems, else the plan applied.
async fn import_rules(
    State(state): State<AppState>,
    Acting(actor): Acting,
    Path(tenant): Path<String>,
    query: Result<Query<ImportQuery>, QueryRejection>,
    headers: axum::http::HeaderMap,
    body: axum::body::Bytes,
) -> Result<impl IntoResponse, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let content_type = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json");
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    let format = match essence.as_str() {
        "application/json" => FileFormat::Json,
        "application/yaml" | "application/x-yaml" | "text/yaml" | "text/x-yaml" => FileFormat::Yaml,
        other => {
            return Err(ApiError::BadRequest(format!(
                "a rules file is sent as application/json or application/yaml, not {other:?}"
            )))
        }
    };
    let text = std::str::from_utf8(&body)
        .map_err(|_| ApiError::BadRequest("a rules file is UTF-8 text".into()))?;
    let file = read_rules_file(text, format).map_err(ApiError::BadRequest)?;
    Ok(Json(
        state
            .admin
            .import_rules(
                &actor,
                &tenant,
                &file.rules,
                RuleSet::All,
                !query.dry_run,
                query.expect.as_deref(),
            )
            .await?,
    ))
}

async fn list_keys(
    State(state): State<AppState>,
    Acting(actor): Acting,
    Path(tenant): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    Ok(Json(state.admin.list_keys(&actor, &tenant).await?))
}

async fn create_key(
    State(state): State<AppState>,
    Acting(actor): Acting,
    Path(tenant): Path<String>,
    AppJson(body): AppJson<KeyBody>,
) -> Result<impl IntoResponse, ApiError> {
    Ok((
        StatusCode::CREATED,
        Json(state.admin.create_key(&actor, &tenant, &body).await?),
    ))
}

async fn rotate_key(
    State(state): State<AppState>,
    Acting(actor): Acting,
    Path((tenant, id)): Path<(String, String)>,
    AppJson(body): AppJson<RotateBody>,
) -> Result<impl IntoResponse, ApiError> {
    Ok((
        StatusCode::CREATED,
        Json(state.admin.rotate_key(&actor, &tenant, &id, &body).await?),
    ))
}

async fn revoke_key(
    State(state): State<AppState>,
    Acting(actor): Acting,
    Path((tenant, id)): Path<(String, String)>,
) -> Result<impl IntoResponse, ApiError> {
    Ok(Json(state.admin.revoke_key(&actor, &tenant, &id).await?))
}

async fn get_quotas(
    State(state): State<AppState>,
    Acting(actor): Acting,
    Path(tenant): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    Ok(Json(state.admin.quotas(&actor, &tenant).await?))
}

async fn set_quotas(
    State(state): State<AppState>,
    Acting(actor): Acting,
    Path(tenant): Path<String>,
    AppJson(body): AppJson<QuotasBody>,
) -> Result<impl IntoResponse, ApiError> {
    Ok(Json(state.admin.set_quotas(&actor, &tenant, &body).await?))
}

async fn list_users(
    State(state): State<AppState>,
    Acting(actor): Acting,
) -> Result<impl IntoResponse, ApiError> {
    let users = state.admin.list_users(&actor).await?;
    Ok(Json(
        users
            .into_iter()
            .map(app::auth::UserInfo::from)
            .collect::<Vec<_>>(),
    ))
}

async fn disable_user(
    State(state): State<AppState>,
    Acting(actor): Acting,
    Path(id): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let user = state.admin.set_user_disabled(&actor, &id, true).await?;
    Ok(Json(app::auth::UserInfo::from(user)))
}

async fn enable_user(
    State(state): State<AppState>,
    Acting(actor): Acting,
    Path(id): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let user = state.admin.set_user_disabled(&actor, &id, false).await?;
    Ok(Json(app::auth::UserInfo::from(user)))
}

async fn reset_user_password(
    State(state): State<AppState>,
    Acting(actor): Acting,
    Path(id): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let (_, password) = state.admin.reset_password(&actor, &id).await?;
    Ok(Json(serde_json::json!({ "password": password })))
}

/// A new tenant admin: their email and initial password (handed over by a safe channel).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NewTenantAdmin {
    email: String,
    password: String,
}

async fn list_tenant_admins(
    State(state): State<AppState>,
    Acting(actor): Acting,
    Path(tenant): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let admins = state.admin.list_tenant_admins(&actor, &tenant).await?;
    Ok(Json(
        admins
            .into_iter()
            .map(app::auth::UserInfo::from)
            .collect::<Vec<_>>(),
    ))
}

async fn add_tenant_admin(
    State(state): State<AppState>,
    Acting(actor): Acting,
    Path(tenant): Path<String>,
    AppJson(body): AppJson<NewTenantAdmin>,
) -> Result<impl IntoResponse, ApiError> {
    // A tenant's admin key may list its admins but not add one: a leaked key would otherwise
    // become a password sign-in that outlives the key's revocation. Tenant admins add admins
    // in the console, signed in.
    if matches!(actor, Actor::TenantAdmin { .. }) {
        return Err(ApiError::Forbidden(
            "only operator keys add console users; a tenant admin adds admins on the console's Admins page".into(),
        ));
    }
    let user = state
        .admin
        .create_user(&actor, &body.email, Some(&tenant), &body.password)
        .await?;
    Ok((StatusCode::CREATED, Json(app::auth::UserInfo::from(user))))
}

async fn delete_user(
    State(state): State<AppState>,
    Acting(actor): Acting,
    Path(id): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    state.admin.delete_user(&actor, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn list_user_sessions(
    State(state): State<AppState>,
    Acting(actor): Acting,
    Path(id): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let sessions = state.admin.user_sessions(&actor, &id).await?;
    Ok(Json(
        sessions
            .into_iter()
            .map(|s| s.info(None))
            .collect::<Vec<_>>(),
    ))
}

async fn end_user_sessions(
    State(state): State<AppState>,
    Acting(actor): Acting,
    Path(id): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let ended = state.admin.end_user_sessions(&actor, &id).await?;
    Ok(Json(serde_json::json!({ "sessions_ended": ended })))
}

async fn list_operator_keys(
    State(state): State<AppState>,
    Acting(actor): Acting,
) -> Result<impl IntoResponse, ApiError> {
    Ok(Json(state.admin.list_operator_keys(&actor).await?))
}

async fn rotate_operator_key(
    State(state): State<AppState>,
    Acting(actor): Acting,
    Path(id): Path<String>,
    AppJson(body): AppJson<RotateBody>,
) -> Result<impl IntoResponse, ApiError> {
    Ok((
        StatusCode::CREATED,
        Json(state.admin.rotate_operator_key(&actor, &id, &body).await?),
    ))
}

async fn revoke_operator_key(
    State(state): State<AppState>,
    Acting(actor): Acting,
    Path(id): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    Ok(Json(state.admin.revoke_operator_key(&actor, &id).await?))
}

async fn reset_bucket(
    State(state): State<AppState>,
    Acting(actor): Acting,
    Path((tenant, id)): Path<(String, String)>,
    AppJson(input): AppJson<ResetInput>,
) -> Result<impl IntoResponse, ApiError> {
    Ok(Json(
        state
            .admin
            .reset_bucket(&actor, &tenant, &id, &input)
            .await?,
    ))
}

async fn list_overrides(
    State(state): State<AppState>,
    Acting(actor): Acting,
    Path((tenant, id)): Path<(String, String)>,
) -> Result<impl IntoResponse, ApiError> {
    Ok(Json(
        state.admin.list_overrides(&actor, &tenant, &id).await?,
    ))
}

/// 201 with a new override, 200 when it replaced the subject's override.
async fn set_override(
    State(state): State<AppState>,
    Acting(actor): Acting,
    Path((tenant, id)): Path<(String, String)>,
    AppJson(body): AppJson<OverrideBody>,
) -> Result<impl IntoResponse, ApiError> {
    let (set, created) = state
        .admin
        .set_override(&actor, &tenant, &id, &body)
        .await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(set)))
}

async fn delete_override(
    State(state): State<AppState>,
    Acting(actor): Acting,
    Path((tenant, id, override_id)): Path<(String, String, String)>,
) -> Result<impl IntoResponse, ApiError> {
    state
        .admin
        .delete_override(&actor, &tenant, &id, &override_id)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn simulate(
    State(state): State<AppState>,
    Acting(actor): Acting,
    Path(tenant): Path<String>,
    AppJson(input): AppJson<SimulateInput>,
) -> Result<impl IntoResponse, ApiError> {
    Ok(Json(state.admin.simulate(&actor, &tenant, &input).await?))
}

/// The audit filter from the query string (`actor`, `action`, `since_ms`, `until_ms`).
fn audit_filter(
    query: Result<Query<AuditFilter>, QueryRejection>,
) -> Result<AuditFilter, ApiError> {
    query
        .map(|Query(filter)| filter.normalized())
        .map_err(|e| ApiError::BadRequest(e.body_text()))
}

async fn tenant_audit(
    State(state): State<AppState>,
    Acting(actor): Acting,
    Path(tenant): Path<String>,
    query: Result<Query<AuditFilter>, QueryRejection>,
) -> Result<impl IntoResponse, ApiError> {
    let filter = audit_filter(query)?;
    Ok(Json(
        state
            .admin
            .audit_events(&actor, Some(&tenant), &filter)
            .await?,
    ))
}

async fn platform_audit(
    State(state): State<AppState>,
    Acting(actor): Acting,
    query: Result<Query<AuditFilter>, QueryRejection>,
) -> Result<impl IntoResponse, ApiError> {
    let filter = audit_filter(query)?;
    Ok(Json(state.admin.audit_events(&actor, None, &filter).await?))
}
