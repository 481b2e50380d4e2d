//! The users page (operators): every console user, disabled or enabled, and a password reset
//! whose new password is shown once.

use leptos::prelude::*;

use super::{ResetUserPassword, SetUserDisabled, UserInfo};
use crate::ui::{format_utc, ConfirmButton, ErrorNote};

/// Operators: every console user with their role and state; disable, enable, reset password.
#[component]
pub fn UsersPage() -> impl IntoView {
    let set_disabled = ServerAction::<SetUserDisabled>::new();
    let reset = ServerAction::<ResetUserPassword>::new();
    let users = Resource::new(
        move || (set_disabled.version().get(), reset.version().get()),
        |_| super::list_users(),
    );
    view! {
        <h1>"Users"</h1>
        <section class="card" aria-labelledby="users-title">
            <h2 id="users-title">"Console users"</h2>
            <p class="muted">
                "A disabled user cannot sign in, and their sessions end at once on every instance. "
                "A reset gives a new random password, shown here once, and ends the user's sessions. "
                "Tenant admins are added on the " <a href="/tenants">"Tenants"</a> " page."
            </p>
            <Transition fallback=|| view! { <p class="muted">"Loading users…"</p> }>
                {move || users.get().map(|reading| match reading {
                    Err(e) => view! { <ErrorNote error=e/> }.into_any(),
                    Ok(list) => view! {
                        <table class="grid" data-testid="users-table">
                            <thead><tr>
                                <th scope="col">"Email"</th><th scope="col">"Role"</th>
                                <th scope="col">"Created (UTC)"</th><th scope="col">"State"</th>
                                <th scope="col">"Actions"</th>
                            </tr></thead>
                            <tbody>
                                {list.into_iter().map(|u| view! {
                                    <UserRow user=u set_disabled=set_disabled reset=reset/>
                                }).collect_view()}
                            </tbody>
                        </table>
                    }.into_any(),
                })}
            </Transition>
            {move || set_disabled.value().get().and_then(Result::err).map(|e| view! { <ErrorNote error=e/> })}
            {move || reset.value().get().map(|r| match r {
                Ok(done) => view! {
                    <p class="ok" role="status" data-testid="password-reset">
                        "New password for " {done.email} ": "
                        <code data-testid="reset-password-value">{done.password}</code>
                        ". Hand it over now: it is not shown again."
                    </p>
                }.into_any(),
                Err(e) => view! { <ErrorNote error=e/> }.into_any(),
            })}
        </section>
    }
}

#[component]
fn UserRow(
    user: UserInfo,
    set_disabled: ServerAction<SetUserDisabled>,
    reset: ServerAction<ResetUserPassword>,
) -> impl IntoView {
    let enabled = user.disabled_at.is_none();
    let email = user.email.clone();
    let (label, question) = if enabled {
        (
            "Disable",
            format!("Disable {email}? They cannot sign in, and their sessions end now."),
        )
    } else {
        ("Enable", format!("Enable {email}? They can sign in again."))
    };
    let toggle = Callback::new({
        let id = user.id.clone();
        move |()| {
            set_disabled.dispatch(SetUserDisabled {
                user: id.clone(),
                disabled: enabled,
            });
        }
    });
    let reset_it = Callback::new({
        let id = user.id.clone();
        move |()| {
            reset.dispatch(ResetUserPassword { user: id.clone() });
        }
    });
    let role = match user.tenant_id {
        Some(tenant) => view! { "admin of " <a href=format!("/tenants/{tenant}/rules")><code>{tenant.clone()}</code></a> }.into_any(),
        None => view! { "operator" }.into_any(),
    };
    view! {
        <tr data-testid="user-row" data-email=email.clone() data-state=if enabled { "enabled" } else { "disabled" }>
            <td>{email.clone()}</td>
            <td>{role}</td>
            <td>{format_utc(user.created_at)}</td>
            <td>
                <span class="badge" class:bad=!enabled data-testid="user-state">
                    {match user.disabled_at {
                        None => "enabled".to_owned(),
                        Some(at) => format!("disabled {}", format_utc(at)),
                    }}
                </span>
            </td>
            <td class="links">
                <ConfirmButton label=label.to_owned() question=question on_confirm=toggle danger=enabled
                    testid={if enabled { "disable-user" } else { "enable-user" }}/>
                <ConfirmButton label="Reset password".to_owned()
                    question=format!("Give {email} a new password? Their sessions end now.")
                    on_confirm=reset_it danger=true testid="reset-user-password"/>
            </td>
        </tr>
    }
}
