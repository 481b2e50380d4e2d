//! `GET /v1/openapi.json`: the OpenAPI 3.1 document of the public API. It is written by hand
//! next to the handlers it describes; a test validates it with an OpenAPI validator and calls
//! every operation it lists, checking each answer's status is one the document declares.

use axum::Json;
use serde_json::{json, Value};

use super::check::MAX_BODY_BYTES;
use crate::decide::input::MAX_REQUEST_ID_BYTES;
use app::rules::{
    MAX_COST, MAX_DESCRIPTOR_ENTRIES, MAX_LIMIT, MAX_NAME_BYTES, MAX_PERIOD_MS, MAX_ROUTE_BYTES,
};

fn problem(description: &str) -> Value {
    json!({ "description": description, "content": { "application/problem+json": { "schema": { "$ref": "#/components/schemas/Problem" } } } })
}

fn ok(description: &str, schema: Value) -> Value {
    json!({ "description": description, "content": { "application/json": { "schema": schema } } })
}

fn schema(name: &str) -> Value {
    json!({ "$ref": format!("#/components/schemas/{name}") })
}

fn list_of(name: &str) -> Value {
    json!({ "type": "array", "items": schema(name) })
}

fn body(name: &str) -> Value {
    json!({ "required": true, "content": { "application/json": { "schema": schema(name) } } })
}

/// The standard error answers of an admin operation.
fn admin_errors(mut responses: Value, with_body: bool) -> Value {
    let map = responses.as_object_mut().expect("responses are an object");
    if with_body {
        map.insert(
            "400".into(),
            problem("Invalid input; `errors` lists the fields."),
        );
    }
    map.insert("401".into(), problem("No valid API key."));
    map.insert(
        "403".into(),
        problem("A check key, or an operation reserved for operators."),
    );
    map.insert(
        "404".into(),
        problem("No such resource, or one of another tenant."),
    );
    map.entry("503")
        .or_insert_with(|| problem("The configuration store is unavailable."));
    responses
}

fn tenant_param() -> Value {
    json!({ "name": "tenant", "in": "path", "required": true, "schema": { "type": "string" }, "description": "The tenant id." })
}

fn id_param(what: &str) -> Value {
    json!({ "name": "id", "in": "path", "required": true, "schema": { "type": "string" }, "description": format!("The {what} id.") })
}

/// The audit log's query-string filters.
fn audit_filters() -> Value {
    json!([
        { "name": "actor", "in": "query", "schema": { "type": "string" }, "description": "Actors containing this text, in any case, e.g. ops@ or user:ops@example.com." },
        { "name": "action", "in": "query", "schema": { "type": "string" }, "description": "Exactly this action, e.g. key.revoke." },
        { "name": "since_ms", "in": "query", "schema": { "type": "integer" }, "description": "Events at or after this Unix time in ms." },
        { "name": "until_ms", "in": "query", "schema": { "type": "integer" }, "description": "Events at or before this Unix time in ms." },
        { "name": "before_id", "in": "query", "schema": { "type": "integer" }, "description": "Events older than the event with this id: the next page after a full page (100 events) that ended with it." }
    ])
}

fn operation(id: &str, tag: &str, summary: &str, responses: Value) -> Value {
    json!({ "operationId": id, "tags": [tag], "summary": summary, "responses": responses })
}

/// The document.
pub fn document() -> Value {
    let rule_id = id_param("rule");
    let key_id = id_param("key");
    let mut document = json!({
        "openapi": "3.1.0",
        "info": {
            "title": "Sluice",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "A multi-tenant, distributed rate limiter. Services call /v1/check; admins and operators manage tenants, rules and keys under /v1/admin."
        },
        "security": [{ "apiKey": [] }, { "bearer": [] }],
        "paths": {
            "/v1/check": { "post": {
                "operationId": "check", "tags": ["check"],
                "summary": "Decide whether a request may go ahead (check keys only).",
                "requestBody": body("CheckRequest"),
                "responses": {
                    "200": { "description": "Allowed.", "headers": rate_limit_headers(false), "content": { "application/json": { "schema": schema("CheckResponse") } } },
                    "429": { "description": "Denied (application/json); or refused because the check would create a bucket or keep a request_id past the tenant's quota of live buckets (application/problem+json, with Retry-After, nothing consumed).", "headers": rate_limit_headers(true), "content": { "application/json": { "schema": schema("CheckResponse") }, "application/problem+json": { "schema": schema("Problem") } } },
                    "400": problem("Invalid JSON, oversized body, route, subject or request_id, or a cost out of range."),
                    "401": problem("Unknown, revoked or expired key."),
                    "403": problem("Not a check key, or the tenant is suspended."),
                    "503": problem("The limiter cannot decide and a matching rule fails closed, or the key is not cached and the store is down.")
                }
            } },
            "/v1/admin/tenants": {
                "get": operation("listTenants", "tenants", "List every tenant (operators).", admin_errors(json!({ "200": ok("The tenants.", list_of("Tenant")) }), false)),
                "post": {
                    "operationId": "createTenant", "tags": ["tenants"], "summary": "Create a tenant (operators).",
                    "requestBody": body("TenantCreate"),
                    "responses": admin_errors(json!({ "201": ok("Created.", schema("Tenant")), "409": problem("A tenant with this name exists.") }), true)
                }
            },
            "/v1/admin/tenants/{tenant}": {
                "parameters": [tenant_param()],
                "get": operation("getTenant", "tenants", "Read a tenant.", admin_errors(json!({ "200": ok("The tenant.", schema("Tenant")) }), false))
            },
            "/v1/admin/tenants/{tenant}/suspend": {
                "parameters": [tenant_param()],
                "post": operation("suspendTenant", "tenants", "Suspend a tenant: its check keys get 403 (operators).", admin_errors(json!({ "200": ok("Suspended.", schema("Tenant")) }), false))
            },
            "/v1/admin/tenants/{tenant}/resume": {
                "parameters": [tenant_param()],
                "post": operation("resumeTenant", "tenants", "Resume a suspended tenant (operators).", admin_errors(json!({ "200": ok("Active again.", schema("Tenant")) }), false))
            },
            "/v1/admin/tenants/{tenant}/rules": {
                "parameters": [tenant_param()],
                "get": operation("listRules", "rules", "List the tenant's rules.", admin_errors(json!({ "200": ok("The rules.", list_of("Rule")) }), false)),
                "post": {
                    "operationId": "createRule", "tags": ["rules"], "summary": "Create a rule.",
                    "requestBody": body("RuleBody"),
                    "responses": admin_errors(json!({ "201": ok("Created.", schema("Rule")), "409": problem("A rule with this name exists in the tenant, the tenant already has the most rules of this match (4 per route, 4 default, 4 all), or it has reached its quota of rules.") }), true)
                }
            },
            "/v1/admin/tenants/{tenant}/rules/{id}": {
                "parameters": [tenant_param(), rule_id.clone()],
                "get": operation("getRule", "rules", "Read a rule.", admin_errors(json!({ "200": ok("The rule.", schema("Rule")) }), false)),
                "put": {
                    "operationId": "replaceRule", "tags": ["rules"], "summary": "Replace a rule.",
                    "requestBody": body("RuleBody"),
                    "responses": admin_errors(json!({ "200": ok("Replaced.", schema("Rule")), "409": problem("Another rule has this name, or the change would pass the rules-per-match cap.") }), true)
                },
                "delete": operation("deleteRule", "rules", "Delete a rule.", admin_errors(json!({ "204": { "description": "Deleted." } }), false))
            },
            "/v1/admin/tenants/{tenant}/keys": {
                "parameters": [tenant_param()],
                "get": operation("listKeys", "keys", "List the tenant's keys (display prefixes, never keys).", admin_errors(json!({ "200": ok("The keys.", list_of("ApiKey")) }), false)),
                "post": {
                    "operationId": "createKey", "tags": ["keys"],
                    "summary": "Register a key generated by the client: only its SHA-256 and display prefix are sent.",
                    "requestBody": body("KeyCreate"),
                    "responses": admin_errors(json!({ "201": ok("Registered.", schema("ApiKey")), "409": problem("A key with this hash exists, or the tenant has reached its quota of working keys.") }), true)
                }
            },
            "/v1/admin/tenants/{tenant}/keys/{id}/rotate": {
                "parameters": [tenant_param(), key_id.clone()],
                "post": {
                    "operationId": "rotateKey", "tags": ["keys"],
                    "summary": "Register a replacement key; the old one keeps working for grace_seconds.",
                    "requestBody": body("KeyRotate"),
                    "responses": admin_errors(json!({ "201": ok("The new key.", schema("ApiKey")), "409": problem("A key with this hash exists, or the key was revoked meanwhile.") }), true)
                }
            },
            "/v1/admin/tenants/{tenant}/keys/{id}/revoke": {
                "parameters": [tenant_param(), key_id],
                "post": operation("revokeKey", "keys", "Revoke a key on every instance within a second.", admin_errors(json!({ "200": ok("Revoked.", schema("ApiKey")) }), false))
            },
            "/v1/admin/tenants/{tenant}/quotas": {
                "parameters": [tenant_param()],
                "get": operation("getQuotas", "tenants", "The tenant's quotas in force (its admins and operators).", admin_errors(json!({ "200": ok("The quotas.", schema("Quotas")) }), false)),
                "put": {
                    "operationId": "setQuotas", "tags": ["tenants"],
                    "summary": "Set the tenant's quotas (operators only); a field left out goes back to the default. Past a quota, new rules or keys are refused with 409, and checks that would create a bucket with 429.",
                    "requestBody": body("QuotasUpdate"),
                    "responses": admin_errors(json!({ "200": ok("The quotas now in force.", schema("Quotas")) }), true)
                }
            },
            "/v1/admin/operator-keys": {
                "get": operation("listOperatorKeys", "keys", "List the operator keys, newest first (operators only; created with `sluice key create --operator`).", admin_errors(json!({ "200": ok("The operator keys.", list_of("ApiKey")) }), false))
            },
            "/v1/admin/operator-keys/{id}/rotate": {
                "parameters": [key_id.clone()],
                "post": {
                    "operationId": "rotateOperatorKey", "tags": ["keys"],
                    "summary": "Register a replacement operator key; the old one keeps working for grace_seconds (operators only).",
                    "requestBody": body("KeyRotate"),
                    "responses": admin_errors(json!({ "201": ok("The new key.", schema("ApiKey")), "409": problem("A key with this hash exists, or the key was revoked meanwhile.") }), true)
                }
            },
            "/v1/admin/operator-keys/{id}/revoke": {
                "parameters": [key_id.clone()],
                "post": operation("revokeOperatorKey", "keys", "Revoke an operator key on every instance within a second (operators only).", admin_errors(json!({ "200": ok("Revoked.", schema("ApiKey")) }), false))
            },
            "/v1/admin/tenants/{tenant}/rules/export": {
                "parameters": [tenant_param()],
                "get": {
                    "operationId": "exportRules", "tags": ["rules"],
                    "summary": "The tenant's rules as a file: every rule without ids or dates, ordered by name, so two exports diff cleanly. Import it again (here or on another tenant) with importRules.",
                    "parameters": [{ "name": "format", "in": "query", "required": false, "schema": { "type": "string", "enum": ["json", "yaml"], "default": "json" } }],
                    "responses": admin_errors(json!({ "200": {
                        "description": "The rules file.",
                        "content": {
                            "application/json": { "schema": schema("RulesFile") },
                            "application/yaml": { "schema": schema("RulesFile") }
                        }
                    }, "400": problem("An unknown format.") }), false)
                }
            },
            "/v1/admin/tenants/{tenant}/rules/import": {
                "parameters": [tenant_param()],
                "post": {
                    "operationId": "importRules", "tags": ["rules"],
                    "summary": "Make the tenant's rules those of a rules file, matched by name: rules the file lacks are deleted (with their overrides), changed ones replaced in place (same id, same buckets), new ones created. With dry_run=true, only the plan, each entry with its problems; without, the plan applied in one transaction, audited as one rules.import event and announced to every instance. A plan that changes nothing writes nothing.",
                    "parameters": [
                        { "name": "dry_run", "in": "query", "required": false, "schema": { "type": "boolean", "default": false } },
                        { "name": "expect", "in": "query", "required": false, "schema": { "type": "string" }, "description": "The fingerprint of a dry run: apply only if the plan is still exactly that one." }
                    ],
                    "requestBody": {
                        "required": true,
                        "content": {
                            "application/json": { "schema": schema("RulesFile") },
                            "application/yaml": { "schema": { "type": "string" } }
                        }
                    },
                    "responses": admin_errors(json!({ "200": ok("The plan; `applied` says whether it was carried out.", schema("RulesPlan")), "409": problem("The plan collides with the tenant's quota of rules, the rules-per-match cap or a rule's overrides, or (with expect) the rules changed since the dry run.") }), true)
                }
            },
            "/v1/admin/tenants/{tenant}/rules/{id}/overrides": {
                "parameters": [tenant_param(), rule_id.clone()],
                "get": operation("listOverrides", "rules", "The rule's per-subject overrides, by subject.", admin_errors(json!({ "200": ok("The overrides.", list_of("Override")) }), false)),
                "post": {
                    "operationId": "setOverride", "tags": ["rules"],
                    "summary": "Give one subject (`acme-42`) or every subject with a prefix (`acme-*`) another limit under this per-subject rule: an exact subject beats the longest prefix, which beats the rule. Replaces the subject's override if it has one. Every instance applies it within a second; audited as override.set.",
                    "requestBody": body("OverrideSet"),
                    "responses": admin_errors(json!({ "201": ok("Created.", schema("Override")), "200": ok("The subject's override, replaced.", schema("Override")), "409": problem("The rule has the most overrides a rule may have (100).") }), true)
                }
            },
            "/v1/admin/tenants/{tenant}/rules/{id}/overrides/{override_id}": {
                "parameters": [tenant_param(), rule_id.clone(), { "name": "override_id", "in": "path", "required": true, "schema": { "type": "string" }, "description": "The override id." }],
                "delete": operation("deleteOverride", "rules", "Delete an override: its subjects are decided by the rule again, on every instance within a second. Audited as override.delete.", admin_errors(json!({ "204": { "description": "Deleted." } }), false))
            },
            "/v1/admin/tenants/{tenant}/rules/{id}/reset": {
                "parameters": [tenant_param(), rule_id],
                "post": {
                    "operationId": "resetBucket", "tags": ["rules"],
                    "summary": "Clear one bucket of a rule (a subject's, or with `{}` the rule's tenant-wide bucket) on every instance at once: its next check starts full. Audited as rule.reset.",
                    "requestBody": body("ResetRequest"),
                    "responses": admin_errors(json!({ "200": ok("The bucket is cleared.", schema("ResetResult")), "503": problem("The limiter's Redis is unavailable; nothing was cleared. Retry.") }), true)
                }
            },
            "/v1/admin/tenants/{tenant}/simulate": {
                "parameters": [tenant_param()],
                "post": {
                    "operationId": "simulate", "tags": ["rules"],
                    "summary": "Decide a check against the tenant's current rules and counters without consuming anything (a dry run).",
                    "requestBody": body("SimulateRequest"),
                    "responses": admin_errors(json!({ "200": ok("How the check would be decided now.", schema("Simulation")) }), true)
                }
            },
            "/v1/admin/tenants/{tenant}/audit": {
                "parameters": [tenant_param()],
                "get": {
                    "operationId": "tenantAudit", "tags": ["audit"],
                    "summary": "The tenant's audit events, newest first (at most 100; before_id pages on).",
                    "parameters": audit_filters(),
                    "responses": admin_errors(json!({ "200": ok("The events.", list_of("AuditEvent")), "400": problem("A malformed filter.") }), false)
                }
            },
            "/v1/admin/audit": {
                "get": {
                    "operationId": "platformAudit", "tags": ["audit"],
                    "summary": "Every audit event, newest first (operators; at most 100; before_id pages on).",
                    "parameters": audit_filters(),
                    "responses": admin_errors(json!({ "200": ok("The events.", list_of("AuditEvent")), "400": problem("A malformed filter.") }), false)
                }
            },
            "/v1/openapi.json": {
                "get": { "operationId": "openapi", "tags": ["meta"], "summary": "This document.", "security": [],
                         "responses": { "200": { "description": "The OpenAPI document.", "content": { "application/json": { "schema": { "type": "object" } } } } } }
            }
        },
        "components": {
            "securitySchemes": {
                "apiKey": { "type": "apiKey", "in": "header", "name": "X-API-Key" },
                "bearer": { "type": "http", "scheme": "bearer" }
            },
            "schemas": schemas()
        }
    });
    for more in [user_paths(), dashboard_paths(), reserve_paths()] {
        if let (Some(paths), Value::Object(more)) = (document["paths"].as_object_mut(), more) {
            paths.extend(more);
        }
    }
    document
}

/// Reserve and settle: kept apart from [`document`]'s one `json!`, for the macro's recursion
/// limit.
fn reserve_paths() -> Value {
    json!({
        "/v1/reserve": { "post": {
            "operationId": "reserve", "tags": ["check"],
            "summary": "A check whose cost is an estimate, charged at once; when admitted, answers a reservation to settle at the real cost with /v1/settle (check keys only). An unsettled reservation expires after ttl_ms and keeps its estimate.",
            "requestBody": body("ReserveRequest"),
            "responses": {
                "200": { "description": "Allowed; `reservation` is present when a rule charged the estimate in the shared limiter.", "headers": rate_limit_headers(false), "content": { "application/json": { "schema": schema("ReserveResponse") } } },
                "429": { "description": "Denied, no reservation (application/json); or refused by the tenant's quota of live buckets (application/problem+json).", "headers": rate_limit_headers(true), "content": { "application/json": { "schema": schema("ReserveResponse") }, "application/problem+json": { "schema": schema("Problem") } } },
                "400": problem("Invalid JSON, oversized body, route, subject, request_id, cost or ttl_ms."),
                "401": problem("Unknown, revoked or expired key."),
                "403": problem("Not a check key, or the tenant is suspended."),
                "503": problem("The limiter cannot decide and a matching rule fails closed, or the key is not cached and the store is down.")
            }
        } },
        "/v1/release": { "post": {
            "operationId": "release", "tags": ["check"],
            "summary": "Free a lease a check of a concurrency rule answered: its slot in every bucket it holds is free at once (check keys only). Releasing again answers the same (`repeated`).",
            "requestBody": body("ReleaseRequest"),
            "responses": {
                "200": ok("Released, now or before.", schema("ReleaseResponse")),
                "400": problem("Invalid JSON or a malformed lease id."),
                "401": problem("Unknown, revoked or expired key."),
                "403": problem("Not a check key, or the tenant is suspended."),
                "404": problem("No such lease of this tenant: never taken, or it ended by itself after its rule's period."),
                "503": problem("The limiter's store is unavailable: nothing changed; retry (releasing is idempotent).")
            }
        } },
        "/v1/settle": { "post": {
            "operationId": "settle", "tags": ["check"],
            "summary": "Set a reservation's final cost on every rule it charged, in one atomic step: the unused part of the estimate is given back, an overrun charged (a bucket may go into debt). Settling again at the same cost answers the same (`repeated`).",
            "requestBody": body("SettleRequest"),
            "responses": {
                "200": ok("Settled, now or before at this cost.", schema("SettleResponse")),
                "400": problem("Invalid JSON, a malformed reservation id, or a cost out of range."),
                "401": problem("Unknown, revoked or expired key."),
                "403": problem("Not a check key, or the tenant is suspended."),
                "404": problem("No such reservation of this tenant: never made, or expired unsettled (its estimate stays charged)."),
                "409": problem("Already settled at another cost: a reservation is settled once."),
                "503": problem("The limiter's store is unavailable: nothing changed; retry (settling is idempotent).")
            }
        } }
    })
}

/// The schemas of reserve and settle: a check's request and response, extended.
fn reserve_schemas(check_request: &Value, check_response: &Value) -> Value {
    let mut request = check_request.clone();
    request["properties"]["ttl_ms"] = json!({ "type": "integer",
        "minimum": crate::limiter::MIN_RESERVATION_TTL_MS, "maximum": crate::limiter::MAX_RESERVATION_TTL_MS,
        "default": crate::limiter::DEFAULT_RESERVATION_TTL_MS,
        "description": "How long the reservation waits to be settled; after it, the estimate stays charged." });
    let mut response = check_response.clone();
    response["properties"]["reservation"] = json!({ "type": "string", "pattern": "^[0-9a-f]{32}$",
        "description": "The id to settle. With a request_id, a retry names the same reservation." });
    json!({
        "ReserveRequest": request,
        "ReserveResponse": response,
        "SettleRequest": { "type": "object", "required": ["reservation", "cost"], "additionalProperties": false,
            "properties": {
                "reservation": { "type": "string", "pattern": "^[0-9a-f]{32}$" },
                "cost": { "type": "integer", "minimum": 0, "maximum": MAX_COST, "description": "The final cost; 0 gives the whole estimate back." }
            } },
        "ReleaseRequest": { "type": "object", "required": ["lease"], "additionalProperties": false,
            "properties": { "lease": { "type": "string", "pattern": "^[0-9a-f]{32}$" } } },
        "ReleaseResponse": { "type": "object", "required": ["lease", "repeated"],
            "properties": {
                "lease": { "type": "string" },
                "repeated": { "type": "boolean", "description": "Released before; nothing changed now." }
            } },
        "SettleResponse": { "type": "object", "required": ["reservation", "estimate", "cost", "repeated"],
            "properties": {
                "reservation": { "type": "string" },
                "estimate": { "type": "integer", "description": "What /v1/reserve charged." },
                "cost": { "type": "integer", "description": "The final cost charged in its place." },
                "repeated": { "type": "boolean", "description": "Settled before at this cost; nothing changed now." }
            } }
    })
}

/// What the dashboards answer over the API: kept apart from [`document`]'s one `json!`, for
/// the macro's recursion limit.
fn dashboard_paths() -> Value {
    json!({
            "/v1/admin/tenants/{tenant}/top-denied": {
                "parameters": [tenant_param()],
                "get": {
                    "operationId": "topDenied", "tags": ["dashboards"],
                    "summary": "The tenant's most denied subjects, rule by rule, over the minute now running and the 4 (range=5m) or 59 (range=1h) before it, summed over every instance. Each count is at most the rule's `error` below the true count, never above it; `error` is under 1% of the rule's denials.",
                    "parameters": [
                        { "name": "range", "in": "query", "required": false, "schema": { "type": "string", "enum": ["5m", "1h"], "default": "5m" } },
                        { "name": "limit", "in": "query", "required": false, "schema": { "type": "integer", "minimum": 1, "maximum": crate::admin::top_denied::MAX_SUBJECTS, "default": crate::admin::top_denied::DEFAULT_SUBJECTS }, "description": "Subjects answered per rule." }
                    ],
                    "responses": admin_errors(json!({ "200": ok("The rules that denied anything in the range, most denials first.", schema("TopDenied")), "400": problem("A malformed range or limit."), "503": problem("The store of the dashboards' series (Redis) is unavailable. Retry.") }), false)
                }
            }
    })
}

/// The console users' paths (operators only): kept apart from [`document`]'s one `json!`,
/// which would otherwise pass the macro's recursion limit.
fn user_paths() -> Value {
    let user_id = id_param("user");
    json!({
        "/v1/admin/tenants/{tenant}/users": {
            "parameters": [tenant_param()],
            "get": operation("listTenantAdmins", "users", "List the tenant's admins by email: for operators and the tenant's own admin keys.", admin_errors(json!({ "200": ok("The tenant's admins.", list_of("User")) }), false)),
            "post": {
                "operationId": "addTenantAdmin", "tags": ["users"],
                "summary": "Add a console user who administers this tenant, with an initial password to hand over by a safe channel; audited as user.create (operator keys only: a tenant admin adds admins in the console, so a leaked admin key cannot become a sign-in).",
                "requestBody": body("TenantAdminCreate"),
                "responses": admin_errors(json!({ "201": ok("Added.", schema("User")), "409": problem("A user with this email exists.") }), true)
            }
        },
        "/v1/admin/users/{id}": {
            "parameters": [user_id.clone()],
            "delete": operation("deleteUser", "users", "Delete a console user: they cannot sign in, and their sessions end at once on every instance; audited as user.delete (operators only, never their own account).", admin_errors(json!({ "204": { "description": "Deleted." } }), false))
        },
        "/v1/admin/users/{id}/sessions": {
            "parameters": [user_id.clone()],
            "get": operation("listUserSessions", "users", "List a console user's live sessions, the most recently used first: when each began, was last used, and the client it began from (operators only).", admin_errors(json!({ "200": ok("The sessions.", list_of("Session")) }), false)),
            "delete": operation("endUserSessions", "users", "End every session of a console user at once, on every instance (they may sign in again); audited as user.sign_out (operators only).", admin_errors(json!({ "200": ok("How many sessions ended.", schema("SessionsEnded")) }), false))
        },
        "/v1/admin/users": {
            "get": operation("listUsers", "users", "List every console user by email, with its role and whether it is disabled (operators only).", admin_errors(json!({ "200": ok("The users.", list_of("User")) }), false))
        },
        "/v1/admin/users/{id}/disable": {
            "parameters": [user_id.clone()],
            "post": operation("disableUser", "users", "Disable a console user: they cannot sign in, and their sessions end at once on every instance; audited as user.disable (operators only).", admin_errors(json!({ "200": ok("The user, disabled.", schema("User")) }), false))
        },
        "/v1/admin/users/{id}/enable": {
            "parameters": [user_id.clone()],
            "post": operation("enableUser", "users", "Let a disabled console user sign in again; audited as user.enable (operators only).", admin_errors(json!({ "200": ok("The user, enabled.", schema("User")) }), false))
        },
        "/v1/admin/users/{id}/reset-password": {
            "parameters": [user_id.clone()],
            "post": operation("resetUserPassword", "users", "Give a console user a new random password, answered here once, and end their sessions; audited as user.reset_password, never with the password (operators only).", admin_errors(json!({ "200": ok("The new password.", schema("PasswordReset")) }), false))
        }
    })
}

fn rate_limit_headers(denied: bool) -> Value {
    let int = json!({ "type": "integer", "minimum": 0 });
    let mut headers = json!({
        "X-RateLimit-Limit": { "schema": int, "description": "The deciding rule's limit." },
        "X-RateLimit-Remaining": { "schema": int, "description": "What is left of it." },
        "X-RateLimit-Reset": { "schema": int, "description": "Seconds until it is whole again." },
        "RateLimit-Policy": { "schema": { "type": "string" }, "description": "draft-ietf-httpapi-ratelimit-headers-10: \"<policy>\";q=<limit>;w=<window seconds>" },
        "RateLimit": { "schema": { "type": "string" }, "description": "draft-10: \"<policy>\";r=<remaining>;t=<seconds>" }
    });
    if denied {
        headers["Retry-After"] = json!({ "schema": { "type": "integer", "minimum": 1 }, "description": "Seconds to wait; absent when the cost can never fit." });
    }
    headers
}

fn schemas() -> Value {
    let name = json!({ "type": "string", "minLength": 1, "maxLength": MAX_NAME_BYTES, "pattern": "^[A-Za-z0-9_.:/-]+$" });
    let text = json!({ "type": "string", "minLength": 1, "maxLength": MAX_ROUTE_BYTES });
    let millis = json!({ "type": "integer", "description": "Unix time in milliseconds." });
    let nullable_millis =
        json!({ "type": ["integer", "null"], "description": "Unix time in milliseconds." });
    let rule_body = json!({
        "type": "object", "additionalProperties": false,
        "required": ["name", "match", "scope", "algorithm", "limit", "period_ms"],
        "properties": {
            "name": name,
            "match": { "type": "string", "enum": ["exact", "prefix", "default", "all", "descriptor"],
                "description": "exact and prefix match the check's route; default applies when no route rule matches; all applies to every check; descriptor matches an Envoy rate-limit descriptor (gRPC ShouldRateLimit), never a route." },
            "route": text,
            "descriptor": {
                "type": "array", "minItems": 1, "maxItems": MAX_DESCRIPTOR_ENTRIES,
                "description": "descriptor rules only: the entry keys the descriptor has, in order; an entry with a value must be equal, and the values of the entries without one are the subject (scope subject exactly when some entry has no value).",
                "items": { "type": "object", "additionalProperties": false, "required": ["key"],
                    "properties": { "key": text, "value": text } }
            },
            "scope": { "type": "string", "enum": ["tenant", "subject"] },
            "algorithm": { "type": "string", "enum": ["token_bucket", "gcra", "leaky_bucket", "fixed_window", "sliding_window", "sliding_log", "concurrency"],
                "description": "concurrency: at most limit requests in flight per bucket; a check answers a lease to release with /v1/release, which otherwise ends after period_ms." },
            "limit": { "type": "integer", "minimum": 1, "maximum": MAX_LIMIT },
            "period_ms": { "type": "integer", "minimum": 1, "maximum": MAX_PERIOD_MS },
            "burst": { "type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "description": "Bucket algorithms only; defaults to limit." },
            "penalty": { "type": "boolean", "default": false },
            "failure_mode": { "type": "string", "enum": ["closed", "open", "local"], "default": "closed",
                "description": "When the limiter cannot decide: closed answers 503, open allows, local limits in each instance with limit ÷ live instances." },
            "shadow": { "type": "boolean", "default": false },
            "enabled": { "type": "boolean", "default": true },
            "allow_override": { "type": "boolean", "default": false,
                "description": "fixed_window descriptor rules only: a gRPC request may set this descriptor's limit (Envoy's per-descriptor limit override), compared with the window's count for its unit; otherwise such a request is INVALID_ARGUMENT." }
        }
    });
    let schemas = json!({
        "Problem": {
            "type": "object", "required": ["type", "title", "status", "detail"],
            "properties": {
                "type": { "type": "string" }, "title": { "type": "string" }, "status": { "type": "integer" },
                "detail": { "type": "string", "description": "What went wrong and what to do next." },
                "errors": { "type": "array", "items": { "type": "object", "required": ["field", "message"],
                    "properties": { "field": { "type": "string" }, "message": { "type": "string" } } } }
            }
        },
        "CheckRequest": {
            "type": "object", "required": ["route"], "additionalProperties": false,
            "description": format!("At most {MAX_BODY_BYTES} bytes."),
            "properties": {
                "route": { "type": "string", "minLength": 1, "maxLength": MAX_ROUTE_BYTES, "examples": ["POST /transfers/{id}"] },
                "cost": { "type": "integer", "minimum": 1, "maximum": MAX_COST, "default": 1 },
                "subject": text,
                "request_id": { "type": "string", "minLength": 1, "maxLength": MAX_REQUEST_ID_BYTES,
                                "description": "Makes the check idempotent for 10 minutes." }
            }
        },
        "CheckResponse": {
            "type": "object", "required": ["allowed", "policy", "limit", "remaining", "reset_after_ms", "retry_after_ms"],
            "properties": {
                "allowed": { "type": "boolean" },
                "policy": { "type": ["string", "null"], "description": "The deciding rule; null when no rule applies." },
                "limit": { "type": ["integer", "null"] },
                "remaining": { "type": ["integer", "null"] },
                "reset_after_ms": { "type": ["integer", "null"] },
                "retry_after_ms": { "type": ["integer", "null"] },
                "never_fits": { "type": "boolean", "description": "The cost exceeds the rule's capacity: do not retry." },
                "degraded": { "type": "string", "enum": ["fail_open", "local"], "description": "The limiter could not decide: fail_open, a fail-open rule allowed; local, this instance decided with its share of the limit (limit ÷ live instances)." },
                "lease": { "type": "string", "pattern": "^[0-9a-f]{32}$", "description": "When a concurrency rule admitted the request: release it with /v1/release when done; it ends by itself after the rule's period_ms." }
            }
        },
        "TenantCreate": { "type": "object", "required": ["name"], "additionalProperties": false,
            "properties": { "name": { "type": "string", "minLength": 1, "maxLength": 100 } } },
        "Tenant": {
            "type": "object", "required": ["id", "name", "status", "created_at", "updated_at"],
            "properties": { "id": { "type": "string" }, "name": { "type": "string" },
                "status": { "type": "string", "enum": ["active", "suspended"] },
                "created_at": millis, "updated_at": millis }
        },
        "RuleBody": rule_body,
        "Rule": rule_schema(&rule_body, &millis),
        "KeyCreate": {
            "type": "object", "additionalProperties": false, "required": ["kind", "name", "hash", "prefix"],
            "properties": {
                "kind": { "type": "string", "enum": ["check", "admin"] },
                "name": { "type": "string", "minLength": 1, "maxLength": 100 },
                "hash": { "type": "string", "pattern": "^[0-9a-f]{64}$", "description": "SHA-256 of the key, lower-case hex." },
                "prefix": { "type": "string", "pattern": "^sl_(chk_|adm_)[0-9a-f]{5}$", "description": "The key's first 12 characters, for display: its kind's start and lower-case hex digits." },
                "expires_in_seconds": { "type": "integer", "minimum": 1, "maximum": crate::admin::keys::MAX_LIFETIME_SECONDS, "description": "The key stops working this long after it is registered." }
            }
        },
        "Quotas": {
            "type": "object", "required": ["max_rules", "max_keys", "max_live_buckets"],
            "properties": {
                "max_rules": { "type": "integer", "minimum": 0, "description": "The most rules the tenant may have." },
                "max_keys": { "type": "integer", "minimum": 0, "description": "The most keys it may hold that are neither revoked nor expired." },
                "max_live_buckets": { "type": "integer", "minimum": 0, "description": "The most buckets (and records of callers' request_ids, kept 10 minutes) it may hold in the limiter at once." }
            }
        },
        "QuotasUpdate": {
            "type": "object", "additionalProperties": false,
            "properties": {
                "max_rules": { "type": ["integer", "null"], "minimum": 0, "maximum": crate::admin::quotas::MAX_QUOTA, "description": "Absent or null: the default." },
                "max_keys": { "type": ["integer", "null"], "minimum": 0, "maximum": crate::admin::quotas::MAX_QUOTA, "description": "Absent or null: the default." },
                "max_live_buckets": { "type": ["integer", "null"], "minimum": 0, "maximum": crate::admin::quotas::MAX_LIVE_BUCKETS_QUOTA, "description": "Absent or null: the default." }
            }
        },
        "KeyRotate": {
            "type": "object", "additionalProperties": false, "required": ["hash", "prefix"],
            "properties": {
                "hash": { "type": "string", "pattern": "^[0-9a-f]{64}$" },
                "prefix": { "type": "string", "pattern": "^sl_(chk_|adm_|op_)[0-9a-f]{5,6}$", "description": "The new key's first 12 characters (the same kind as the old key)." },
                "grace_seconds": { "type": "integer", "minimum": 0, "maximum": crate::admin::keys::MAX_GRACE_SECONDS, "default": 0 }
            }
        },
        "ApiKey": {
            "type": "object", "required": ["id", "tenant_id", "kind", "name", "prefix", "created_at", "state"],
            "properties": {
                "id": { "type": "string" }, "tenant_id": { "type": ["string", "null"] },
                "kind": { "type": "string", "enum": ["check", "admin", "operator"] },
                "name": { "type": "string" }, "prefix": { "type": "string" },
                "created_at": millis, "expires_at": nullable_millis, "revoked_at": nullable_millis,
                "last_used_at": nullable_millis, "replaced_by": { "type": ["string", "null"] },
                "listed_at": { "type": "integer", "description": "When this answer was made (ms since the epoch): the moment `state` is as of." },
                "state": { "type": "string", "enum": ["live", "grace", "expired", "revoked"],
                           "description": "Whether the key authenticates now: grace is a rotated key that works until it expires." }
            }
        },
        "SimulateRequest": {
            "type": "object", "required": ["route"], "additionalProperties": false,
            "properties": {
                "route": text,
                "subject": text,
                "cost": { "type": "integer", "minimum": 1, "maximum": MAX_COST, "default": 1 }
            }
        },
        "Simulation": {
            "type": "object", "required": ["allowed", "policy", "rules", "now_ms"],
            "properties": {
                "allowed": { "type": "boolean" },
                "policy": { "type": ["string", "null"], "description": "The rule a real check would report; null when no rule applies." },
                "now_ms": millis,
                "rules": { "type": "array", "items": {
                    "type": "object",
                    "required": ["rule_id", "policy", "shadow", "scope", "verdict", "limit", "remaining", "reset_after_ms", "retry_after_ms"],
                    "properties": {
                        "rule_id": { "type": "string" }, "policy": { "type": "string" }, "shadow": { "type": "boolean" },
                        "scope": { "type": "string", "enum": ["tenant", "subject"], "description": "Whose bucket the rule counts: the subject's own, or one for the whole tenant (what a reset of it clears)." },
                        "verdict": { "type": "string", "enum": ["allow", "deny", "never_fits"] },
                        "limit": { "type": "integer" },
                        "remaining": { "type": "number", "description": "Capacity left if the check were made now." },
                        "reset_after_ms": { "type": "integer" }, "retry_after_ms": { "type": "integer" }
                    }
                } }
            }
        },
        "AuditEvent": {
            "type": "object", "required": ["id", "actor", "action", "detail", "at"],
            "properties": {
                "id": { "type": "integer" }, "tenant_id": { "type": ["string", "null"] },
                "actor": { "type": "string", "description": "key:<prefix>, user:<email> or cli" },
                "action": { "type": "string", "examples": ["rule.create", "tenant.suspend"] },
                "target": { "type": ["string", "null"] },
                "detail": { "type": "string", "description": "JSON text." },
                "at": millis
            }
        }
    });
    let Value::Object(mut all) = schemas else {
        unreachable!("the schemas are an object")
    };
    let reserve = reserve_schemas(&all["CheckRequest"], &all["CheckResponse"]);
    for more in [subject_schemas(), file_schemas(), user_schemas(), reserve] {
        if let Value::Object(more) = more {
            all.extend(more);
        }
    }
    Value::Object(all)
}

/// The console users' schemas: kept apart from [`schemas`]' one `json!`, whose expansion would
/// pass the compiler's recursion limit.
fn user_schemas() -> Value {
    let millis = json!({ "type": "integer", "description": "Unix time in milliseconds." });
    let nullable_millis =
        json!({ "type": ["integer", "null"], "description": "Unix time in milliseconds." });
    json!({
        "User": {
            "type": "object", "required": ["id", "email", "role", "tenant_id", "created_at", "disabled_at"],
            "properties": {
                "id": { "type": "string" }, "email": { "type": "string" },
                "role": { "type": "string", "enum": ["operator", "tenant_admin"] },
                "tenant_id": { "type": ["string", "null"], "description": "A tenant admin's tenant." },
                "created_at": millis,
                "disabled_at": nullable_millis
            }
        },
        "TenantAdminCreate": {
            "type": "object", "required": ["email", "password"], "additionalProperties": false,
            "properties": {
                "email": { "type": "string", "maxLength": 254, "description": "An email address; stored in lower case." },
                "password": { "type": "string", "minLength": crate::passwords::MIN_PASSWORD_CHARS, "description": "The initial password; never stored, only its argon2id hash." }
            }
        },
        "Session": {
            "type": "object", "required": ["created_at", "last_seen_at", "client", "expires_at", "current"],
            "properties": {
                "created_at": nullable_millis, "last_seen_at": nullable_millis,
                "client": { "type": ["string", "null"], "description": "The client address and browser the session began from." },
                "expires_at": millis,
                "current": { "type": "boolean", "description": "Whether it is the session asking: always false here, where keys act." }
            }
        },
        "SessionsEnded": {
            "type": "object", "required": ["sessions_ended"],
            "properties": { "sessions_ended": { "type": "integer", "minimum": 0 } }
        },
        "PasswordReset": {
            "type": "object", "required": ["password"],
            "properties": { "password": { "type": "string", "minLength": crate::passwords::MIN_PASSWORD_CHARS, "description": "The new password, shown only in this answer." } }
        }
    })
}

/// The schemas of what acts on one subject's bucket: overrides and resets (apart from
/// [`schemas`], whose `json!` would pass the macro recursion limit).
fn subject_schemas() -> Value {
    let millis = json!({ "type": "integer", "description": "Unix time in milliseconds." });
    json!({
        "OverrideSet": {
            "type": "object", "required": ["subject", "limit"], "additionalProperties": false,
            "properties": {
                "subject": { "type": "string", "minLength": 1, "maxLength": 256, "description": "An exact subject, or a prefix followed by `*`." },
                "limit": { "type": "integer", "minimum": 1, "maximum": MAX_LIMIT },
                "period_ms": { "type": ["integer", "null"], "minimum": 1, "maximum": MAX_PERIOD_MS, "description": "Left out: the rule's period." },
                "burst": { "type": ["integer", "null"], "minimum": 1, "maximum": MAX_LIMIT, "description": "Left out: equal to limit (bucket algorithms only)." }
            }
        },
        "Override": {
            "type": "object", "required": ["id", "rule_id", "subject", "limit", "created_at"],
            "properties": {
                "id": { "type": "string" }, "rule_id": { "type": "string" }, "subject": { "type": "string" },
                "limit": { "type": "integer" }, "period_ms": { "type": ["integer", "null"] }, "burst": { "type": ["integer", "null"] },
                "created_at": millis
            }
        },
        "TopDenied": {
            "type": "object", "required": ["tenant", "range", "since_ms", "rules"],
            "properties": {
                "tenant": { "type": "string" },
                "range": { "type": "string", "enum": ["5m", "1h"] },
                "since_ms": { "type": "integer", "description": "The start of the first minute counted (Unix ms)." },
                "rules": { "type": "array", "items": {
                    "type": "object", "required": ["rule_id", "policy", "exists", "denied", "error", "subjects"],
                    "properties": {
                        "rule_id": { "type": "string" },
                        "policy": { "type": "string", "description": "The rule's name (as last counted, if it no longer exists)." },
                        "exists": { "type": "boolean" },
                        "denied": { "type": "integer", "description": "Every denial of the rule in the range." },
                        "error": { "type": "integer", "description": "How far below its true count any subject's count may be." },
                        "subjects": { "type": "array", "items": {
                            "type": "object", "required": ["subject", "denied"],
                            "properties": {
                                "subject": { "type": ["string", "null"], "description": "Null for the rule's one tenant-wide bucket." },
                                "denied": { "type": "integer" }
                            }
                        } }
                    }
                } }
            }
        },
        "ResetRequest": {
            "type": "object", "additionalProperties": false,
            "properties": {
                "subject": { "type": ["string", "null"], "description": "The subject whose bucket to clear; required by a rule that limits each subject, left out for a tenant-wide rule." }
            }
        },
        "ResetResult": {
            "type": "object", "required": ["rule_id", "policy", "subject", "cleared"],
            "properties": {
                "rule_id": { "type": "string" }, "policy": { "type": "string" },
                "subject": { "type": ["string", "null"] },
                "cleared": { "type": "boolean", "description": "Whether the bucket held anything (false: it was empty or had expired)." }
            }
        }
    })
}

/// The schemas of rules as files (apart from [`schemas`], for the macro recursion limit).
fn file_schemas() -> Value {
    let problems = json!({ "type": "array", "items": schema("FieldError") });
    // A plan shows each rule as the file gives it, which may be invalid (its `problems` say how).
    let given = json!({ "type": "object", "description": "The rule as the file gives it (a RuleBody, which may be invalid: see problems)." });
    json!({
        "RulesFile": {
            "type": "object", "required": ["rules"], "additionalProperties": false,
            "properties": { "rules": { "type": "array", "items": schema("RuleBody") } }
        },
        "FieldError": {
            "type": "object", "required": ["field", "message"],
            "properties": { "field": { "type": "string" }, "message": { "type": "string" } }
        },
        "RulesPlan": {
            "type": "object", "required": ["create", "update", "delete", "unchanged", "problems", "fingerprint", "applied"],
            "properties": {
                "create": { "type": "array", "items": {
                    "type": "object", "required": ["rule", "problems"],
                    "properties": { "rule": given.clone(), "problems": problems.clone() }
                } },
                "update": { "type": "array", "items": {
                    "type": "object", "required": ["id", "rule", "changes", "problems"],
                    "properties": {
                        "id": { "type": "string" }, "rule": given, "problems": problems.clone(),
                        "changes": { "type": "array", "items": {
                            "type": "object", "required": ["field", "before", "after"],
                            "properties": { "field": { "type": "string" }, "before": { "type": "string" }, "after": { "type": "string" } }
                        } }
                    }
                } },
                "delete": { "type": "array", "items": {
                    "type": "object", "required": ["id", "name", "overrides"],
                    "properties": { "id": { "type": "string" }, "name": { "type": "string" }, "overrides": { "type": "integer", "description": "The per-subject overrides deleted with the rule." } }
                } },
                "unchanged": { "type": "array", "items": { "type": "string" }, "description": "The names of the rules left as they are." },
                "problems": problems,
                "fingerprint": { "type": "string", "description": "Send as `expect` to apply exactly this plan." },
                "applied": { "type": "boolean" }
            }
        }
    })
}

/// `GET /v1/openapi.json`.
pub async fn handler() -> Json<Value> {
    Json(document())
}

/// A stored rule: the body's fields and its id, tenant and times, in one flat object (as
/// `app::rules::RuleInfo` serialises it). Written out rather than as `allOf` of the body,
/// whose `additionalProperties: false` would refuse the extra fields.
fn rule_schema(body: &Value, millis: &Value) -> Value {
    let mut rule = body.clone();
    rule["additionalProperties"] = json!(false);
    let properties = rule["properties"]
        .as_object_mut()
        .expect("a rule body has properties");
    properties.insert("id".into(), json!({ "type": "string" }));
    properties.insert("tenant_id".into(), json!({ "type": "string" }));
    properties.insert("created_at".into(), millis.clone());
    properties.insert("updated_at".into(), millis.clone());
    let required = rule["required"]
        .as_array_mut()
        .expect("a rule body has required fields");
    for field in [
        "id",
        "tenant_id",
        "created_at",
        "updated_at",
        "penalty",
        "failure_mode",
        "shadow",
        "enabled",
        "allow_override",
    ] {
        required.push(json!(field));
    }
    rule
}
