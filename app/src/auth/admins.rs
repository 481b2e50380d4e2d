//! A tenant's admins page: who administers the tenant, and adding another. For operators and
//! for the tenant's own admins; disabling, deleting and resetting stay with operators (the
//! Users page).

use leptos::ev::SubmitEvent;
use leptos::prelude::*;

use super::UserInfo;
use crate::tenants::view::TenantTabs;
use crate::tenants::{password_too_short, AddTenantAdmin, MIN_PASSWORD_CHARS};
use crate::ui::{format_utc, use_tenant, ErrorNote};

/// The tenant's admins, and a form to add one.
#[component]
pub fn TenantAdminsPage() -> impl IntoView {
    let tenant = use_tenant();
    let add = ServerAction::<AddTenantAdmin>::new();
    let admins = Resource::new(
        move || (tenant.get(), add.version().get()),
        |(t, _)| super::list_tenant_admins(t),
    );
    view! {
        <TenantTabs tenant=tenant current="admins"/>
        <section class="card" aria-labelledby="admins-title">
            <h2 id="admins-title">"Admins"</h2>
            <p class="muted">
                "Each admin signs in to this console and manages this tenant's rules, keys and limits. "
                "An operator can disable or delete an admin."
            </p>
            <Transition fallback=|| view! { <p class="muted">"Loading admins…"</p> }>
                {move || admins.get().map(|reading| match reading {
                    Err(e) => view! { <ErrorNote error=e/> }.into_any(),
                    Ok(list) => view! { <AdminsTable admins=list/> }.into_any(),
                })}
            </Transition>
        </section>
        <AddForm tenant=tenant add=add/>
    }
}

#[component]
fn AdminsTable(admins: Vec<UserInfo>) -> impl IntoView {
    view! {
        <table class="grid" data-testid="admins-table">
            <thead><tr>
                <th scope="col">"Email"</th><th scope="col">"Added (UTC)"</th><th scope="col">"State"</th>
            </tr></thead>
            <tbody>
                {admins.into_iter().map(|u| {
                    let email = u.email.clone();
                    view! {
                    <tr data-testid="admin-row" data-email=email>
                        <td>{u.email}</td>
                        <td>{format_utc(u.created_at)}</td>
                        <td>
                            <span class="badge" class:bad=u.disabled_at.is_some()>
                                {match u.disabled_at {
                                    None => "enabled".to_owned(),
                                    Some(at) => format!("disabled {}", format_utc(at)),
                                }}
                            </span>
                        </td>
                    </tr>
                    }
                }).collect_view()}
            </tbody>
        </table>
    }
}

/// Adding an admin: an email and an initial password, handed over by a safe channel.
#[component]
fn AddForm(tenant: Memo<String>, add: ServerAction<AddTenantAdmin>) -> impl IntoView {
    let (email, set_email) = signal(String::new());
    let (password, set_password) = signal(String::new());
    let password_problem = move || password.with(|p| password_too_short(p));
    let on_submit = move |ev: SubmitEvent| {
        ev.prevent_default();
        add.dispatch(AddTenantAdmin {
            tenant: tenant.get_untracked(),
            email: email.get_untracked(),
            password: password.get_untracked(),
        });
    };
    // The password is not kept on the page once it has been used.
    Effect::new(move |_| {
        if let Some(Ok(())) = add.value().get() {
            set_password.set(String::new());
        }
    });
    view! {
        <section class="card" aria-labelledby="add-admin-title">
            <h2 id="add-admin-title">"Add an admin"</h2>
            <form on:submit=on_submit data-testid="add-admin-form">
                <label for="new-admin-email">"Email"</label>
                <input id="new-admin-email" type="email" required autocomplete="off"
                    prop:value=email on:input=move |ev| set_email.set(event_target_value(&ev))/>
                <label for="new-admin-password">"Initial password"</label>
                <input id="new-admin-password" type="password" required autocomplete="new-password"
                    minlength=MIN_PASSWORD_CHARS.to_string() aria-describedby="new-admin-password-problem"
                    prop:value=password on:input=move |ev| set_password.set(event_target_value(&ev))/>
                <span id="new-admin-password-problem" class="field-error">{password_problem}</span>
                <p class="muted">"Give them the password by a safe channel; they can change it on their Account page."</p>
                <button type="submit" data-testid="add-admin"
                    disabled=move || add.pending().get() || password_problem().is_some()>"Add admin"</button>
            </form>
            {move || add.value().get().map(|r| match r {
                Ok(()) => view! { <p class="ok" role="status" data-testid="admin-added">"Added " {email.get_untracked()} "."</p> }.into_any(),
                Err(e) => view! { <ErrorNote error=e/> }.into_any(),
            })}
        </section>
    }
}
