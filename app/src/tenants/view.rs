//! The tenants page (operators) and the tab bar of a tenant's pages.

use leptos::ev::SubmitEvent;
use leptos::prelude::*;
use leptos_router::components::A;

use super::{AddTenantAdmin, CreateTenant, SetTenantActive, TenantInfo, MIN_PASSWORD_CHARS};
use crate::ui::{format_utc, ConfirmButton, ErrorNote};

/// Operators: every tenant, with create, suspend/resume and "add an admin".
#[component]
pub fn TenantsPage() -> impl IntoView {
    let create = ServerAction::<CreateTenant>::new();
    let set_active = ServerAction::<SetTenantActive>::new();
    let add_admin = ServerAction::<AddTenantAdmin>::new();
    let tenants = Resource::new(
        move || (create.version().get(), set_active.version().get()),
        |_| super::list_tenants(),
    );
    let (name, set_name) = signal(String::new());
    Effect::new(move |_| {
        if let Some(Ok(_)) = create.value().get() {
            set_name.set(String::new());
        }
    });
    let on_create = move |ev: SubmitEvent| {
        ev.prevent_default();
        create.dispatch(CreateTenant {
            name: name.get_untracked(),
        });
    };

    view! {
        <h1>"Tenants"</h1>
        <section class="card" aria-labelledby="tenants-title">
            <h2 id="tenants-title">"All tenants"</h2>
            <Transition fallback=|| view! { <p class="muted">"Loading tenants…"</p> }>
                {move || tenants.get().map(|reading| match reading {
                    Err(e) => view! { <ErrorNote error=e/> }.into_any(),
                    Ok(list) if list.is_empty() => view! {
                        <p class="muted" data-testid="no-tenants">"No tenants yet. Create the first one below."</p>
                    }.into_any(),
                    Ok(list) => view! {
                        <table class="grid" data-testid="tenants-table">
                            <thead><tr>
                                <th scope="col">"Name"</th><th scope="col">"Status"</th>
                                <th scope="col">"Created (UTC)"</th><th scope="col">"Pages"</th>
                                <th scope="col">"Actions"</th>
                            </tr></thead>
                            <tbody>
                                {list.into_iter().map(|t| view! { <TenantRow tenant=t set_active=set_active/> }).collect_view()}
                            </tbody>
                        </table>
                    }.into_any(),
                })}
            </Transition>
            {move || set_active.value().get().and_then(Result::err).map(|e| view! { <ErrorNote error=e/> })}
        </section>

        <section class="card" aria-labelledby="new-tenant-title">
            <h2 id="new-tenant-title">"Create a tenant"</h2>
            <form on:submit=on_create>
                <label for="tenant-name">"Name"</label>
                <input id="tenant-name" required maxlength="100" autocomplete="off"
                    prop:value=name on:input=move |ev| set_name.set(event_target_value(&ev))/>
                <button type="submit" disabled=move || create.pending().get()>"Create tenant"</button>
            </form>
            {move || create.value().get().map(|r| match r {
                Ok(t) => view! { <p class="ok" role="status" data-testid="tenant-created">"Created " {t.name} "."</p> }.into_any(),
                Err(e) => view! { <ErrorNote error=e/> }.into_any(),
            })}
        </section>

        <AddAdminForm tenants=tenants add_admin=add_admin/>
    }
}

#[component]
fn TenantRow(tenant: TenantInfo, set_active: ServerAction<SetTenantActive>) -> impl IntoView {
    let active = tenant.is_active();
    let id = tenant.id.clone();
    let name = tenant.name.clone();
    let (label, question) = if active {
        (
            "Suspend",
            format!("Suspend {name}? Its keys stop working at once."),
        )
    } else {
        ("Resume", format!("Resume {name}? Its keys work again."))
    };
    let toggle = Callback::new({
        let id = id.clone();
        move |()| {
            set_active.dispatch(SetTenantActive {
                tenant: id.clone(),
                active: !active,
            });
        }
    });
    view! {
        <tr data-testid="tenant-row" data-tenant=id.clone() data-name=name.clone()>
            <td>{name.clone()}<br/><code class="muted small">{id.clone()}</code></td>
            <td><span class="badge" class:bad=!active data-testid="tenant-status">{tenant.status.as_str()}</span></td>
            <td>{format_utc(tenant.created_at)}</td>
            <td class="links">
                <A href=format!("/tenants/{id}/rules")>"Rules"</A>
                <A href=format!("/tenants/{id}/keys")>"Keys"</A>
                <A href=format!("/tenants/{id}/audit")>"Audit"</A>
                <A href=format!("/tenants/{id}/simulate")>"Simulate"</A>
                <A href=format!("/tenants/{id}/admins")>"Admins"</A>
            </td>
            <td>
                <ConfirmButton label=label.to_owned() question=question on_confirm=toggle danger=active
                    testid={if active { "suspend" } else { "resume" }}/>
            </td>
        </tr>
    }
}

#[component]
fn AddAdminForm(
    tenants: Resource<Result<Vec<TenantInfo>, crate::error::AppError>>,
    add_admin: ServerAction<AddTenantAdmin>,
) -> impl IntoView {
    let (tenant, set_tenant) = signal(String::new());
    let (email, set_email) = signal(String::new());
    let (password, set_password) = signal(String::new());
    let password_problem = move || {
        let p = password.get();
        (!p.is_empty() && p.chars().count() < MIN_PASSWORD_CHARS)
            .then(|| format!("at least {MIN_PASSWORD_CHARS} characters"))
    };
    let on_submit = move |ev: SubmitEvent| {
        ev.prevent_default();
        add_admin.dispatch(AddTenantAdmin {
            tenant: tenant.get_untracked(),
            email: email.get_untracked(),
            password: password.get_untracked(),
        });
    };
    Effect::new(move |_| {
        if let Some(Ok(())) = add_admin.value().get() {
            set_password.set(String::new());
        }
    });
    view! {
        <section class="card" aria-labelledby="add-admin-title">
            <h2 id="add-admin-title">"Add a tenant admin"</h2>
            <p class="muted">"A tenant admin signs in here and manages one tenant's rules and keys. Give them the password by a safe channel."</p>
            <form on:submit=on_submit>
                <label for="admin-tenant">"Tenant"</label>
                <Transition fallback=|| view! { <select id="admin-tenant" disabled><option>"Loading…"</option></select> }>
                    {move || tenants.get().map(|reading| {
                        let list = reading.unwrap_or_default();
                        view! {
                            <select id="admin-tenant" required on:change=move |ev| set_tenant.set(event_target_value(&ev))>
                                <option value="">"Choose a tenant"</option>
                                {list.into_iter().map(|t| {
                                    let selected = t.id == tenant.get_untracked();
                                    view! { <option value=t.id.clone() selected=selected>{t.name}</option> }
                                }).collect_view()}
                            </select>
                        }
                    })}
                </Transition>
                <label for="admin-email">"Email"</label>
                <input id="admin-email" type="email" required autocomplete="off"
                    prop:value=email on:input=move |ev| set_email.set(event_target_value(&ev))/>
                <label for="admin-password">"Initial password"</label>
                <input id="admin-password" type="password" required autocomplete="new-password"
                    aria-describedby="admin-password-problem"
                    prop:value=password on:input=move |ev| set_password.set(event_target_value(&ev))/>
                <span id="admin-password-problem" class="field-error">{password_problem}</span>
                <button type="submit" disabled=move || add_admin.pending().get() || password_problem().is_some()>
                    "Add admin"
                </button>
            </form>
            {move || add_admin.value().get().map(|r| match r {
                Ok(()) => view! { <p class="ok" role="status" data-testid="admin-added">"Added " {email.get_untracked()} "."</p> }.into_any(),
                Err(e) => view! { <ErrorNote error=e/> }.into_any(),
            })}
        </section>
    }
}

/// The title and tab bar of a tenant's pages.
#[component]
pub fn TenantTabs(
    /// The tenant's id.
    tenant: Memo<String>,
    /// Which tab is open: `dashboard`, `rules`, `keys`, `audit`, `simulate` or `admins`.
    current: &'static str,
) -> impl IntoView {
    let info = Resource::new(move || tenant.get(), super::get_tenant);
    let tabs = [
        ("dashboard", "Dashboard"),
        ("rules", "Rules"),
        ("keys", "Keys"),
        ("audit", "Audit log"),
        ("simulate", "Simulate"),
        ("admins", "Admins"),
    ];
    view! {
        <div class="tenant-head">
            <Transition fallback=|| view! { <h1>"Tenant"</h1> }>
                {move || info.get().map(|reading| match reading {
                    Ok(t) => view! {
                        <h1 data-testid="tenant-name">{t.name.clone()}
                            <span class="badge" class:bad=!t.is_active() data-testid="tenant-status">{t.status.as_str()}</span>
                        </h1>
                    }.into_any(),
                    Err(e) => view! { <h1>"Tenant"</h1><ErrorNote error=e/> }.into_any(),
                })}
            </Transition>
            <nav class="tabs" aria-label="Tenant">
                {tabs.into_iter().map(|(path, label)| view! {
                    <a href=move || format!("/tenants/{}/{path}", tenant.get())
                        aria-current=move || (path == current).then_some("page")>{label}</a>
                }).collect_view()}
            </nav>
        </div>
    }
}
