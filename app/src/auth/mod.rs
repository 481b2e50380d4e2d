//! Sign-in and sign-out. Passwords are checked on the server (argon2id); the browser keeps
//! only an HttpOnly, SameSite=Strict session cookie.

use leptos::prelude::*;
use leptos::server_fn::codec::Json;
use leptos_router::hooks::use_navigate;
use serde::{Deserialize, Serialize};

use crate::error::AppError;
use crate::ui::{FormFields, PostForm};

pub mod admins;
pub mod users;

/// What a console user may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Every tenant, and the platform's own pages.
    Operator,
    /// One tenant's rules, keys, audit log and dashboard.
    TenantAdmin,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Operator => "operator",
            Role::TenantAdmin => "tenant_admin",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [Role::Operator, Role::TenantAdmin]
            .into_iter()
            .find(|r| r.as_str() == s)
    }
}

/// A stored value that names no role (read back from the database).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown role {0:?}")]
pub struct UnknownRole(pub String);

impl TryFrom<String> for Role {
    type Error = UnknownRole;

    fn try_from(s: String) -> Result<Self, UnknownRole> {
        Self::parse(&s).ok_or(UnknownRole(s))
    }
}

/// The person behind the current session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignedInUser {
    pub email: String,
    pub role: Role,
    /// A tenant admin's tenant.
    pub tenant_id: Option<String>,
}

impl SignedInUser {
    /// A tenant admin's tenant; `None` for an operator.
    pub fn admin_of(&self) -> Option<&str> {
        self.tenant_id
            .as_deref()
            .filter(|_| self.role == Role::TenantAdmin)
    }

    /// Where this user starts: the tenants for an operator, their tenant's rules otherwise.
    pub fn home(&self) -> String {
        match self.admin_of() {
            Some(t) => format!("/tenants/{t}/rules"),
            None => "/tenants".to_owned(),
        }
    }
}

/// A console user as operators see it in the list of users.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserInfo {
    pub id: String,
    pub email: String,
    pub role: Role,
    /// A tenant admin's tenant.
    pub tenant_id: Option<String>,
    pub created_at: i64,
    /// When an operator disabled the user; `None` while the user may sign in.
    pub disabled_at: Option<i64>,
}

/// One live console session of a user, as they (or an operator) see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionInfo {
    /// When it began (Unix milliseconds); `None` for a session from before this was kept.
    pub created_at: Option<i64>,
    /// When a request last used it.
    pub last_seen_at: Option<i64>,
    /// The client address and browser it began from.
    pub client: Option<String>,
    /// When it ends unless used again.
    pub expires_at: i64,
    /// Whether it is the session asking (never on the admin API, which has none).
    pub current: bool,
}

/// A reset password, answered once with the email it belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PasswordReset {
    pub email: String,
    pub password: String,
}

/// The signed-in user, read once per page load and shared through context; sign-in and
/// sign-out refetch it so the navigation follows.
#[derive(Debug, Clone, Copy)]
pub struct UserResource(pub Resource<Result<Option<SignedInUser>, AppError>>);

/// What this feature's server functions need from the server (which implements it). Acting
/// calls act as the session's user: an operator on any tenant, a tenant admin on their own
/// tenant only (any other tenant is `NotFound`); without a session they are `Unauthorized`.
#[cfg(feature = "ssr")]
#[async_trait::async_trait]
pub trait AuthPort: Send + Sync + 'static {
    /// Checks the credentials and starts a session for the current request.
    async fn sign_in(&self, email: &str, password: &str) -> Result<SignedInUser, AppError>;

    /// Ends the current request's session.
    async fn sign_out(&self) -> Result<(), AppError>;

    /// The user of the current request's session.
    async fn current_user(&self) -> Result<Option<SignedInUser>, AppError>;

    /// Sets the session's user's password to `new` once `current` is theirs, and ends every
    /// other session of that user; this one goes on under a new id. Returns how many other
    /// sessions ended.
    async fn change_password(&self, current: &str, new: &str) -> Result<u64, AppError>;

    /// Every console user (operators only).
    async fn list_users(&self) -> Result<Vec<UserInfo>, AppError>;

    /// Disables another user (their sessions end at once) or enables them (operators only).
    async fn set_user_disabled(&self, user: &str, disabled: bool) -> Result<UserInfo, AppError>;

    /// Gives another user a new random password, answered once, and ends their sessions
    /// (operators only).
    async fn reset_user_password(&self, user: &str) -> Result<PasswordReset, AppError>;

    /// A tenant's admins: for operators and for that tenant's own admins.
    async fn list_tenant_admins(&self, tenant: &str) -> Result<Vec<UserInfo>, AppError>;

    /// Deletes another user, whose sessions end at once (operators only).
    async fn delete_user(&self, user: &str) -> Result<(), AppError>;

    /// The signed-in user's live sessions, the most recently used first.
    async fn list_sessions(&self) -> Result<Vec<SessionInfo>, AppError>;

    /// Ends every session of the signed-in user but this one; returns how many ended.
    async fn sign_out_others(&self) -> Result<u64, AppError>;
}

/// Signs in; a wrong email or password gets [`AppError::Invalid`] with a clear message.
#[server(prefix = "/api", endpoint = "sign_in")]
pub async fn sign_in(email: String, password: String) -> Result<SignedInUser, AppError> {
    crate::context::port::<dyn AuthPort>()?
        .sign_in(&email, &password)
        .await
}

/// Ends the current session.
#[server(prefix = "/api", endpoint = "sign_out")]
pub async fn sign_out() -> Result<(), AppError> {
    crate::context::port::<dyn AuthPort>()?.sign_out().await
}

/// The signed-in user, or `None`.
#[server(prefix = "/api", endpoint = "me")]
pub async fn current_user() -> Result<Option<SignedInUser>, AppError> {
    crate::context::port::<dyn AuthPort>()?.current_user().await
}

/// Changes the signed-in user's own password (the current one is required) and ends their
/// other sessions; answers how many ended.
#[server(prefix = "/api", endpoint = "account/password")]
pub async fn change_password(
    current_password: String,
    new_password: String,
) -> Result<u64, AppError> {
    crate::context::port::<dyn AuthPort>()?
        .change_password(&current_password, &new_password)
        .await
}

/// Every console user (operators only).
#[server(prefix = "/api", endpoint = "users/list", input = Json)]
pub async fn list_users() -> Result<Vec<UserInfo>, AppError> {
    crate::context::port::<dyn AuthPort>()?.list_users().await
}

/// Disables or enables another user (operators only).
#[server(prefix = "/api", endpoint = "users/set_disabled", input = Json)]
pub async fn set_user_disabled(user: String, disabled: bool) -> Result<UserInfo, AppError> {
    crate::context::port::<dyn AuthPort>()?
        .set_user_disabled(&user, disabled)
        .await
}

/// A new random password for another user, answered once (operators only).
#[server(prefix = "/api", endpoint = "users/reset_password", input = Json)]
pub async fn reset_user_password(user: String) -> Result<PasswordReset, AppError> {
    crate::context::port::<dyn AuthPort>()?
        .reset_user_password(&user)
        .await
}

/// A tenant's admins: for operators and for that tenant's own admins (who add more with
/// [`crate::tenants::add_tenant_admin`]).
#[server(prefix = "/api", endpoint = "users/tenant_admins", input = Json)]
pub async fn list_tenant_admins(tenant: String) -> Result<Vec<UserInfo>, AppError> {
    crate::context::port::<dyn AuthPort>()?
        .list_tenant_admins(&tenant)
        .await
}

/// Deletes another user, whose sessions end at once (operators only).
#[server(prefix = "/api", endpoint = "users/delete", input = Json)]
pub async fn delete_user(user: String) -> Result<(), AppError> {
    crate::context::port::<dyn AuthPort>()?
        .delete_user(&user)
        .await
}

/// The signed-in user's live sessions.
#[server(prefix = "/api", endpoint = "account/sessions", input = Json)]
pub async fn list_sessions() -> Result<Vec<SessionInfo>, AppError> {
    crate::context::port::<dyn AuthPort>()?
        .list_sessions()
        .await
}

/// Ends the signed-in user's other sessions; answers how many ended.
#[server(prefix = "/api", endpoint = "account/sign_out_others", input = Json)]
pub async fn sign_out_others() -> Result<u64, AppError> {
    crate::context::port::<dyn AuthPort>()?
        .sign_out_others()
        .await
}

/// Whether `next` (already percent-decoded) is a path on this site to return to after
/// sign-in: it starts with one `/` and holds no backslash, whitespace or control character
/// anywhere (a browser drops tabs and newlines from a URL and reads `\` as `/`, so `/<tab>/x`
/// or `/\x` would leave the site), and it is not the sign-in page itself.
pub fn is_local_path(next: &str) -> bool {
    next.starts_with('/')
        && !next.starts_with("//")
        && !next.starts_with("/sign-in")
        && !next
            .chars()
            .any(|c| c == '\\' || c.is_whitespace() || c.is_control())
}

/// The sign-in page.
#[component]
pub fn SignInPage() -> impl IntoView {
    let action = ServerAction::<SignIn>::new();
    let navigate = use_navigate();
    let user = use_context::<UserResource>();
    // Where a page that needed a session sent the user from (a path on this site only).
    let query = leptos_router::hooks::use_query_map();
    let next = move || {
        query
            .with_untracked(|q| q.get("next"))
            .filter(|n| is_local_path(n))
    };
    Effect::new(move |_| {
        if let Some(Ok(signed_in)) = action.value().get() {
            if let Some(user) = user {
                user.0.refetch();
            }
            navigate(
                &next().unwrap_or_else(|| signed_in.home()),
                Default::default(),
            );
        }
    });
    let error = move || match action.value().get() {
        Some(Err(e)) => Some(e.to_string()),
        _ => None,
    };
    view! {
        <section class="card sign-in" aria-labelledby="sign-in-title">
            <h1 id="sign-in-title">"Sign in"</h1>
            <PostForm action=action args=|f: &FormFields| SignIn { email: f.text("email"), password: f.text("password") }>
                <label for="email">"Email"</label>
                <input id="email" name="email" type="email" autocomplete="username" required/>
                <label for="password">"Password"</label>
                <input id="password" name="password" type="password" autocomplete="current-password" required/>
                <button type="submit" disabled=move || action.pending().get()>"Sign in"</button>
            </PostForm>
            {move || error().map(|e| view! { <p class="error" role="alert" data-testid="sign-in-error">{e}</p> })}
            <p class="muted">
                "The first operator account is printed when an embedded instance starts, or made with "
                <code>"sluice user create --operator"</code>"."
            </p>
        </section>
    }
}

/// The signed-in user's page; a way to check that a session works.
#[component]
pub fn AccountPage() -> impl IntoView {
    // The user the whole page already reads (see `App`), not a second request.
    let user = expect_context::<UserResource>().0;
    let sign_out = ServerAction::<SignOut>::new();
    // Made here, not inside the view that waits for the user, so that the server's reading is
    // the one the browser hydrates with (a resource made later is fetched again, and a
    // session's "last used" has moved by then).
    let sign_out_others = ServerAction::<SignOutOthers>::new();
    // A password change ends the other sessions too, and re-keys this one.
    let change_password = ServerAction::<ChangePassword>::new();
    let sessions = Resource::new(
        move || {
            (
                sign_out_others.version().get(),
                change_password.version().get(),
            )
        },
        |_| list_sessions(),
    );
    let navigate = use_navigate();
    let signed_in = use_context::<UserResource>();
    Effect::new(move |_| {
        if let Some(Ok(())) = sign_out.value().get() {
            if let Some(user) = signed_in {
                user.0.refetch();
            }
            navigate("/sign-in", Default::default());
        }
    });
    view! {
        <section class="card" aria-labelledby="account-title">
            <h1 id="account-title">"Account"</h1>
            <Transition fallback=|| view! { <p class="muted">"Loading…"</p> }>
                {move || user.get().map(|reading| match reading {
                    Ok(Some(u)) => view! {
                        <p data-testid="signed-in-as">"Signed in as " <strong>{u.email}</strong> " (" {u.role.as_str()} ")"</p>
                        <PostForm action=sign_out args=|_: &FormFields| SignOut {}>
                            <button type="submit" data-testid="sign-out">"Sign out"</button>
                        </PostForm>
                        <PasswordForm action=change_password/>
                        <Sessions sessions=sessions sign_out_others=sign_out_others/>
                    }.into_any(),
                    Ok(None) => view! {
                        <p data-testid="not-signed-in">"You are not signed in. " <a href="/sign-in">"Sign in"</a></p>
                    }.into_any(),
                    Err(e) => view! { <p class="error" role="alert">{e.to_string()}</p> }.into_any(),
                })}
            </Transition>
        </section>
    }
}

/// Changing one's own password: the current one, then a new one of at least
/// [`crate::tenants::MIN_PASSWORD_CHARS`] characters. Afterwards every other session of the
/// user has ended.
#[component]
fn PasswordForm(action: ServerAction<ChangePassword>) -> impl IntoView {
    let (current, set_current) = signal(String::new());
    let (new_password, set_new_password) = signal(String::new());
    let min = crate::tenants::MIN_PASSWORD_CHARS;
    let short = move || new_password.with(|p| crate::tenants::password_too_short(p));
    let outcome = move || {
        action.value().get().map(|result| match result {
            Ok(ended) => {
                let others = match ended {
                    0 => "no other session was open".to_owned(),
                    1 => "1 other session ended".to_owned(),
                    n => format!("{n} other sessions ended"),
                };
                view! { <p class="ok" role="status" data-testid="password-changed">{format!("Password changed; {others}.")}</p> }.into_any()
            }
            Err(e) => view! { <p class="error" role="alert" data-testid="password-error">{e.to_string()}</p> }.into_any(),
        })
    };
    // A changed password clears the form.
    Effect::new(move |_| {
        if let Some(Ok(_)) = action.value().get() {
            set_current.set(String::new());
            set_new_password.set(String::new());
        }
    });
    view! {
        <h2 id="password-title" class="spaced">"Change your password"</h2>
        <PostForm action=action attr:aria-labelledby="password-title" attr:data-testid="password-form"
            args=|f: &FormFields| ChangePassword {
                current_password: f.text("current_password"),
                new_password: f.text("new_password"),
            }>
            <label for="current-password">"Current password"</label>
            <input id="current-password" name="current_password" type="password"
                autocomplete="current-password" required
                prop:value=current on:input=move |ev| set_current.set(event_target_value(&ev))/>
            <label for="new-password">"New password"</label>
            <input id="new-password" name="new_password" type="password" autocomplete="new-password"
                required minlength=min.to_string() aria-describedby="new-password-hint"
                prop:value=new_password on:input=move |ev| set_new_password.set(event_target_value(&ev))/>
            <span class="field-error" id="new-password-hint">{short}</span>
            <p class="muted">"Your other sessions end at once, on every instance; this one goes on."</p>
            <button type="submit" data-testid="change-password" disabled=move || action.pending().get()>"Change password"</button>
        </PostForm>
        {outcome}
    }
}

/// The signed-in user's sessions (when each began and was last used, and its client), and
/// signing out every other one.
#[component]
fn Sessions(
    sessions: Resource<Result<Vec<SessionInfo>, AppError>>,
    sign_out_others: ServerAction<SignOutOthers>,
) -> impl IntoView {
    let ask = Callback::new(move |()| {
        sign_out_others.dispatch(SignOutOthers {});
    });
    let outcome = move || {
        sign_out_others.value().get().map(|r| match r {
            Ok(ended) => {
                let said = match ended {
                    0 => "No other session was open.".to_owned(),
                    1 => "1 other session ended.".to_owned(),
                    n => format!("{n} other sessions ended."),
                };
                view! { <p class="ok" role="status" data-testid="others-signed-out">{said}</p> }
                    .into_any()
            }
            Err(e) => view! { <crate::ui::ErrorNote error=e/> }.into_any(),
        })
    };
    let when = |at: Option<i64>| at.map_or_else(|| "unknown".to_owned(), crate::ui::format_utc);
    view! {
        <h2 id="sessions-title" class="spaced">"Your sessions"</h2>
        <p class="muted">"Every place you are signed in, the most recently used first."</p>
        <Transition fallback=|| view! { <p class="muted">"Loading sessions…"</p> }>
            {move || sessions.get().map(|reading| match reading {
                Err(e) => view! { <crate::ui::ErrorNote error=e/> }.into_any(),
                Ok(list) => view! {
                    <table class="grid" aria-labelledby="sessions-title" data-testid="sessions-table">
                        <thead><tr>
                            <th scope="col">"Began (UTC)"</th><th scope="col">"Last used (UTC)"</th>
                            <th scope="col">"Client"</th>
                        </tr></thead>
                        <tbody>
                            {list.into_iter().map(|s| view! {
                                <tr data-testid="session-row" data-current=s.current.to_string()>
                                    <td>{when(s.created_at)}</td>
                                    <td>{when(s.last_seen_at)}</td>
                                    <td>
                                        {s.client.unwrap_or_else(|| "unknown".to_owned())}
                                        {s.current.then(|| view! { " " <span class="badge">"this session"</span> })}
                                    </td>
                                </tr>
                            }).collect_view()}
                        </tbody>
                    </table>
                }.into_any(),
            })}
        </Transition>
        <crate::ui::ConfirmButton label="Sign out other sessions".to_owned()
            question="Sign out everywhere else? This session goes on.".to_owned()
            on_confirm=ask danger=true testid="sign-out-others"/>
        {outcome}
    }
}

#[cfg(test)]
mod tests {
    use super::is_local_path;

    #[test]
    fn sign_in_returns_only_to_a_path_on_this_site() {
        for ok in ["/tenants/t1/keys", "/tenants/t1/keys?x=1", "/", "/a%2Fb"] {
            assert!(is_local_path(ok), "{ok}");
        }
        for bad in [
            "//evil.example",
            "/\\evil.example",
            "/\t/evil.example",
            "/\n/evil.example",
            "/\r/evil.example",
            "/ /evil.example",
            "https://evil.example",
            "evil.example",
            "/x\\y",
            "/sign-in?next=/x",
            "",
        ] {
            assert!(!is_local_path(bad), "{bad:?}");
        }
    }
}
