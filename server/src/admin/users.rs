//! Console users: an operator adds a tenant admin; the CLI adds operators and tenant admins,
//! and an embedded instance's first start adds its operator. Each is validated and audited
//! the same way.

use app::auth::Role;
use serde_json::json;

use super::{invalid, Actor, AdminService, Event, ServiceError};
use crate::store;
use crate::store::Tx;

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

/// How a sign-in whose password was checked ended, for its audit event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignIn {
    Done,
    /// An unknown email or a wrong password (the event does not say which).
    Wrong,
    /// The right password for a disabled account.
    Disabled,
}

/// Which of a user's sessions a change ends.
#[derive(Debug, Clone, Copy)]
enum Ending<'a> {
    None,
    All,
    /// All but the one whose row key (`store::sessions::id_hash`) this is.
    AllBut(&'a str),
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
        // Only over the hash the current password was checked against.
        self.replace_password(
            actor,
            user,
            Some(&user.password_hash),
            &hash,
            "user.password",
        )
        .await?
        .ok_or_else(|| {
            ServiceError::Conflict(
                "your password was changed meanwhile (by an operator's reset?): sign in again"
                    .into(),
            )
        })
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
        outcome: SignIn,
    ) -> Result<(), ServiceError> {
        let email: String = if app::text::unreadable(email).is_some() {
            "(unreadable)".to_owned()
        } else {
            email.chars().take(AUDITED_EMAIL_CHARS).collect()
        };
        let (actor, action, reason) = match outcome {
            SignIn::Done => (format!("user:{email}"), "user.sign_in", None),
            SignIn::Wrong => (
                format!("client:{client}"),
                "user.sign_in_failed",
                Some("wrong email or password"),
            ),
            SignIn::Disabled => (
                format!("client:{client}"),
                "user.sign_in_failed",
                Some("the account is disabled"),
            ),
        };
        let mut detail = json!({ "email": email, "client": client });
        if let Some(reason) = reason {
            detail["reason"] = json!(reason);
        }
        store::audit::record(&self.db, None, &actor, action, None, &detail).await?;
        Ok(())
    }

    /// Creates a console user: a tenant admin of `tenant_id`, or (`None`) an operator.
    /// Operators, the CLI and a tenant's own admins add that tenant's admins (another
    /// tenant is not found); only the CLI adds operators. Returns the new user.
    pub async fn create_user(
        &self,
        actor: &Actor,
        email: &str,
        tenant_id: Option<&str>,
        password: &str,
    ) -> Result<store::users::User, ServiceError> {
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
        // A taken email is refused before the (slow) hash; the insert below still decides.
        if store::users::find_by_email(&self.db, &email)
            .await?
            .is_some()
        {
            return Err(store::StoreError::Conflict("a user with this email".into()).into());
        }
        let hash = hash_new_password("password", password).await?;
        let mut tx = self.db.begin().await?;
        let user = store::users::insert(&mut tx, &email, &hash, role, tenant_id).await?;
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
        Ok(user)
    }

    /// The admins of `tenant_id`, by email: for operators and for that tenant's own admins.
    pub async fn list_tenant_admins(
        &self,
        actor: &Actor,
        tenant_id: &str,
    ) -> Result<Vec<store::users::User>, ServiceError> {
        self.authorize(actor, tenant_id).await?;
        Ok(store::users::list_for_tenant(&self.db, tenant_id).await?)
    }

    /// Every console user, by email (operators only).
    pub async fn list_users(&self, actor: &Actor) -> Result<Vec<store::users::User>, ServiceError> {
        actor.require_operator("list console users")?;
        Ok(store::users::list(&self.db).await?)
    }

    /// The user `user_id`, for an operator acting on another user (never on themselves);
    /// `what` says what only operators do.
    async fn other_user(
        &self,
        actor: &Actor,
        user_id: &str,
        what: &str,
    ) -> Result<store::users::User, ServiceError> {
        actor.require_operator(what)?;
        let user = store::users::get(&self.db, user_id)
            .await?
            .ok_or(ServiceError::NotFound("user"))?;
        if actor.label() == format!("user:{}", user.email) {
            return Err(ServiceError::Forbidden(
                "not on your own account: change your password on the Account page".into(),
            ));
        }
        Ok(user)
    }

    /// Disables a user (who may then not sign in, and whose sessions end at once on every
    /// instance) or enables it again; audited as `user.disable` or `user.enable`. Operators
    /// only, and never their own account. Returns the user as it is now.
    pub async fn set_user_disabled(
        &self,
        actor: &Actor,
        user_id: &str,
        disabled: bool,
    ) -> Result<store::users::User, ServiceError> {
        let mut user = self
            .other_user(actor, user_id, "disable and enable users")
            .await?;
        // Already so: nothing to change, end or audit.
        if user.disabled_at.is_some() == disabled {
            return Ok(user);
        }
        let at = disabled.then(store::now_ms);
        let mut tx = self.db.begin().await?;
        if !store::users::set_disabled(&mut tx, &user.id, at).await? {
            return Err(ServiceError::NotFound("user"));
        }
        let action = if disabled {
            "user.disable"
        } else {
            "user.enable"
        };
        let ending = if disabled { Ending::All } else { Ending::None };
        self.commit_user_change(tx, actor, &user, action, ending)
            .await?;
        user.disabled_at = at;
        Ok(user)
    }

    /// Gives a user a new random password, returned once to be handed over, and ends every
    /// session of theirs; audited as `user.reset_password` (never the password). Operators
    /// only, and never their own account (which changes its password on the Account page).
    /// Returns the user's email and the new password.
    pub async fn reset_password(
        &self,
        actor: &Actor,
        user_id: &str,
    ) -> Result<(String, String), ServiceError> {
        let user = self.other_user(actor, user_id, "reset passwords").await?;
        let password = crate::passwords::generate();
        let hash = hash_new_password("password", &password).await?;
        self.replace_password(actor, &user, None, &hash, "user.reset_password")
            .await?
            .ok_or(ServiceError::NotFound("user"))?;
        Ok((user.email, password))
    }

    /// Replaces `user`'s password hash with `hash` (only while it is still `expected`, when
    /// given), ends their sessions and commits with the audit event `action`. Returns how many
    /// sessions ended, or `None` when nothing was replaced.
    async fn replace_password(
        &self,
        actor: &Actor,
        user: &store::users::User,
        expected: Option<&str>,
        hash: &str,
        action: &str,
    ) -> Result<Option<u64>, ServiceError> {
        let mut tx = self.db.begin().await?;
        if !store::users::set_password_hash(&mut tx, &user.id, expected, hash).await? {
            return Ok(None);
        }
        Ok(Some(
            self.commit_user_change(tx, actor, user, action, Ending::All)
                .await?,
        ))
    }

    /// Deletes another user: they can no longer sign in and their sessions end at once on
    /// every instance; audited as `user.delete`. Operators only, and never their own account.
    pub async fn delete_user(&self, actor: &Actor, user_id: &str) -> Result<(), ServiceError> {
        let user = self.other_user(actor, user_id, "delete users").await?;
        let mut tx = self.db.begin().await?;
        if !store::users::delete(&mut tx, &user.id).await? {
            return Err(ServiceError::NotFound("user"));
        }
        self.commit_user_change(tx, actor, &user, "user.delete", Ending::All)
            .await?;
        Ok(())
    }

    /// A user's live sessions, the most recently used first (operators only).
    pub async fn user_sessions(
        &self,
        actor: &Actor,
        user_id: &str,
    ) -> Result<Vec<store::sessions::SessionRow>, ServiceError> {
        actor.require_operator("list a user's sessions")?;
        let user = store::users::get(&self.db, user_id)
            .await?
            .ok_or(ServiceError::NotFound("user"))?;
        Ok(store::sessions::list_for_user(&self.db, &user.id).await?)
    }

    /// Ends every session of another user at once, on every instance (they can sign in
    /// again); audited as `user.sign_out`. Operators only, never their own account. Returns
    /// how many ended.
    pub async fn end_user_sessions(
        &self,
        actor: &Actor,
        user_id: &str,
    ) -> Result<u64, ServiceError> {
        let user = self.other_user(actor, user_id, "sign users out").await?;
        let tx = self.db.begin().await?;
        self.commit_user_change(tx, actor, &user, "user.sign_out", Ending::All)
            .await
    }

    /// Ends every session of `user`, the signed-in user asking, but the one asking (whose row
    /// key is `keep`); audited as `user.sign_out_others`. Returns how many ended.
    pub async fn sign_out_others(
        &self,
        actor: &Actor,
        user: &store::users::User,
        keep: &str,
    ) -> Result<u64, ServiceError> {
        let tx = self.db.begin().await?;
        self.commit_user_change(
            tx,
            actor,
            user,
            "user.sign_out_others",
            Ending::AllBut(keep),
        )
        .await
    }

    /// Commits a change to `user` made in `tx`, first ending the sessions of theirs that
    /// `ending` says, with the audit event `action` (their email and how many sessions ended;
    /// in their tenant's log, or the platform's for an operator). Returns that number.
    async fn commit_user_change(
        &self,
        mut tx: Tx,
        actor: &Actor,
        user: &store::users::User,
        action: &str,
        ending: Ending<'_>,
    ) -> Result<u64, ServiceError> {
        let ended = match ending {
            Ending::None => 0,
            Ending::All => store::sessions::end_for_user(&mut tx, &user.id).await?,
            Ending::AllBut(keep) => store::sessions::end_others(&mut tx, &user.id, keep).await?,
        };
        let detail = json!({ "email": user.email, "sessions_ended": ended });
        self.commit(
            tx,
            actor,
            Event {
                tenant: user.tenant_id.as_deref(),
                action,
                target: Some(&user.id),
                detail,
            },
            [],
        )
        .await?;
        Ok(ended)
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
