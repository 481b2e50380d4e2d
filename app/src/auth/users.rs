//! The users page (operators): every console user, disabled or enabled, deleted, and a password
//! reset whose new password is shown once.

use leptos::prelude::*;

use super::{DeleteUser, ResetUserPassword, SetUserDisabled, UserInfo, UserResource};
use crate::ui::{format_utc, ConfirmButton, ErrorNote};

/// Operators: every console user with their role and state; disable, enable, reset password.
#[component]
pub fn UsersPage() -> impl IntoView {
    let set_disabled = ServerAction::<SetUserDisabled>::new();
    let reset = ServerAction::<ResetUserPassword>::new();
    let delete = ServerAction::<DeleteUser>::new();
    let users = Resource::new(
        move || {
            (
                set_disabled.version().get(),
                reset.version().get(),
                delete.version().get(),
            )
        },
        |_| super::list_users(),
    );
    let actions = Actions {
        set_disabled,
        reset,
        delete,
    };
    // The operator's own row offers nothing: the server refuses these on one's own account.
    let signed_in = expect_context::<UserResource>().0;
    let me = move || {
        signed_in
            .get()
            .and_then(|r| r.ok().flatten())
            .map(|u| u.email)
    };
    view! {
        <h1>"Users"</h1>
        <section class="card" aria-labelledby="users-title">
            <h2 id="users-title">"Console users"</h2>
            <p class="muted">
                "A disabled user cannot sign in, and their sessions end at once on every instance. "
                "A reset gives a new random password, shown here once, and ends the user's sessions. "
                "A deleted user is gone for good; their audit events stay. "
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
                                {list.into_iter().map(|u| {
                                    let own = me().as_deref() == Some(u.email.as_str());
                                    view! { <UserRow user=u actions=actions own=own/> }
                                }).collect_view()}
                            </tbody>
                        </table>
                    }.into_any(),
                })}
            </Transition>
            {move || set_disabled.value().get().and_then(Result::err).map(|e| view! { <ErrorNote error=e/> })}
            {move || delete.value().get().map(|r| match r {
                Ok(()) => view! { <p class="ok" role="status" data-testid="user-deleted">"Deleted."</p> }.into_any(),
                Err(e) => view! { <ErrorNote error=e/> }.into_any(),
            })}
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

/// What a user's row can do.
#[derive(Clone, Copy)]
struct Actions {
    set_disabled: ServerAction<SetUserDisabled>,
    reset: ServerAction<ResetUserPassword>,
    delete: ServerAction<DeleteUser>,
}

#[component]
fn UserRow(
    user: UserInfo,
    actions: Actions,
    /// The signed-in operator's own row, which offers no action.
    own: bool,
) -> impl IntoView {
    let Actions {
        set_disabled,
        reset,
        delete,
    } = actions;
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
    let delete_it = Callback::new({
        let id = user.id.clone();
        move |()| {
            delete.dispatch(DeleteUser { user: id.clone() });
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
                {if own {
                    view! { <span class="muted">"you (see " <a href="/account">"Account"</a> ")"</span> }.into_any()
                } else {
                    view! {
                        <ConfirmButton label=label.to_owned() question=question on_confirm=toggle danger=enabled
                            testid={if enabled { "disable-user" } else { "enable-user" }}/>
                        <ConfirmButton label="Reset password".to_owned()
                            question=format!("Give {email} a new password? Their sessions end now.")
                            on_confirm=reset_it danger=true testid="reset-user-password"/>
                        <ConfirmButton label="Delete".to_owned()
                            question=format!("Delete {email} for good? Their sessions end now.")
                            on_confirm=delete_it danger=true testid="delete-user"/>
                    }.into_any()
                }}
            </td>
        </tr>
    }
}
