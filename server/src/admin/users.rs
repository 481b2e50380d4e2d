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

/// The hash of a new password, once it is long enough (`field` names it in the problem).
async fn hash_new_password(field: &str, password: &str) -> Result<String, ServiceError> {
    let min = crate::passwords::MIN_PASSWORD_CHARS;
    if password.chars().count() < min {
        return Err(invalid(
            field,
            format!("must have at least {min} characters"),
        ));
    }
    crate::passwords::hash(password.to_owned())
        .await
        .map_err(|e| ServiceError::Internal(e.to_string()))
}

/// The most characters of a typed email a failed sign-in's audit event keeps.
const AUDITED_EMAIL_CHARS: usize = 254;

impl AdminService {
    /// Sets `user`'s own password to `new_password` (the caller has checked the current one)
    /// and ends every session of theirs, on every instance, in the same transaction; audited
    /// as `user.password` (in the user's tenant's log, or the platform's for an operator)
    /// with how many sessions ended, never the password. Returns that number.
    pub async fn change_password(
        &self,
        actor: &Actor,
        user: &store::users::User,
        new_password: &str,
    ) -> Result<u64, ServiceError> {
        let hash = hash_new_password("new_password", new_password).await?;
        let mut tx = self.db.begin().await?;
        if !store::users::set_password_hash(&mut tx, &user.id, &hash).await? {
            return Err(ServiceError::NotFound("user"));
        }
        let ended = store::sessions::end_for_user(&mut tx, &user.id).await?;
        let detail = json!({ "email": user.email, "sessions_ended": ended });
        self.commit(
            tx,
            actor,
            Event {
                tenant: user.tenant_id.as_deref(),
                action: "user.password",
                target: Some(&user.id),
                detail,
            },
            [],
        )
        .await?;
        Ok(ended)
    }

    /// Records a sign-in whose password was checked, in the platform's audit log: the email
    /// as typed (cut to 254 characters, or "(unreadable)" when it holds control or invisible
    /// characters), the client's address and the outcome; never the password. A success is
    /// the user's own action (`user:<email>`); a failure is the client's (`client:<address>`),
    /// so a typed email never poses as a user.
    pub async fn record_sign_in(
        &self,
        email: &str,
        client: &str,
        signed_in: bool,
    ) -> Result<(), ServiceError> {
        let email: String = if app::text::unreadable(email).is_some() {
            "(unreadable)".to_owned()
        } else {
            email.chars().take(AUDITED_EMAIL_CHARS).collect()
        };
        let (actor, action) = if signed_in {
            (format!("user:{email}"), "user.sign_in")
        } else {
            (format!("client:{client}"), "user.sign_in_failed")
        };
        let detail = json!({ "email": email, "client": client });
        store::audit::record(&self.db, None, &actor, action, None, &detail).await?;
        Ok(())
    }

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
        let hash = hash_new_password("password", password).await?;
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
