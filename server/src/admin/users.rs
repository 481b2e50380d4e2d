//! Console users: an operator adds a tenant admin; the CLI adds operators and tenant admins,
//! and an embedded instance's first start adds its operator. Each is validated and audited
//! the same way.

use app::auth::Role;
use serde_json::json;

use super::{invalid, Actor, AdminService, Event, ServiceError};
use crate::store;

/// The account an embedded instance creates on its first start.
pub const BOOTSTRAP_EMAIL: &str = "admin@localhost";

fn check_email(email: &str) -> Result<String, ServiceError> {
    let email = email.trim().to_lowercase();
    if !email.contains('@') || email.len() > 254 || email.chars().any(char::is_whitespace) {
        return Err(invalid("email", "must be an email address"));
    }
    if let Some(problem) = app::text::unreadable(&email) {
        return Err(invalid("email", problem));
    }
    Ok(email)
}

impl AdminService {
    /// Creates a console user: a tenant admin of `tenant_id`, or (`None`) an operator.
    /// Operators and the CLI add users; only the CLI adds operators.
    pub async fn create_user(
        &self,
        actor: &Actor,
        email: &str,
        tenant_id: Option<&str>,
        password: &str,
    ) -> Result<(), ServiceError> {
        actor.require_operator("add console users")?;
        let role = match tenant_id {
            Some(tenant) => {
                self.authorize(actor, tenant).await?;
                Role::TenantAdmin
            }
            None if *actor == Actor::Cli => Role::Operator,
            None => {
                return Err(ServiceError::Forbidden(
                    "operators are added on the server host: `sluice user create --operator`"
                        .into(),
                ))
            }
        };
        let email = check_email(email)?;
        let min = crate::passwords::MIN_PASSWORD_CHARS;
        if password.chars().count() < min {
            return Err(invalid(
                "password",
                format!("must have at least {min} characters"),
            ));
        }
        let hash = crate::passwords::hash(password.to_owned())
            .await
            .map_err(|e| ServiceError::Internal(e.to_string()))?;
        let mut tx = self.db.begin().await?;
        store::users::insert(&mut tx, &email, &hash, role, tenant_id).await?;
        let detail = json!({ "email": email, "role": role.as_str() });
        self.commit(
            tx,
            actor,
            Event {
                tenant: tenant_id,
                action: "user.create",
                target: None,
                detail,
            },
            [],
        )
        .await?;
        Ok(())
    }

    /// On an instance with no users yet, creates [`BOOTSTRAP_EMAIL`] as an operator with
    /// `password`. Returns whether it created the account.
    pub async fn bootstrap_operator(&self, password: &str) -> Result<bool, ServiceError> {
        if store::users::exist(&self.db).await? {
            return Ok(false);
        }
        self.create_user(&Actor::Cli, BOOTSTRAP_EMAIL, None, password)
            .await?;
        Ok(true)
    }
}
