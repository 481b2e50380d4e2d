//! The HTML document, the router, and the navigation that follows the user's role.

use leptos::prelude::*;
use leptos_meta::{provide_meta_context, MetaTags, Stylesheet, Title};
use leptos_router::components::{Route, Router, Routes, A};
use leptos_router::{path, SsrMode};

use crate::audit::view::{PlatformAuditPage, TenantAuditPage};
use crate::auth::admins::TenantAdminsPage;
use crate::auth::users::UsersPage;
use crate::auth::{current_user, AccountPage, Role, SignInPage, SignedInUser, UserResource};
use crate::dashboard::view::{FleetDashboardPage, TenantDashboardPage};
use crate::gate::{Gate, Need};
use crate::keys::view::KeysPage;
use crate::rules::file_page::RulesFilePage;
use crate::rules::view::RulesPage;
use crate::simulate::view::SimulatePage;
use crate::status::StatusWidget;
use crate::tenants::view::TenantsPage;
use crate::ui::focus_soon;

/// The whole HTML document, rendered on the server for every page.
pub fn shell(options: LeptosOptions) -> impl IntoView {
    view! {
        <!DOCTYPE html>
        <html lang="en">
            <head>
                <meta charset="utf-8"/>
                <meta name="viewport" content="width=device-width, initial-scale=1"/>
                <link rel="icon" type="image/svg+xml" href="/favicon.svg"/>
                <AutoReload options=options.clone()/>
                <HydrationScripts options/>
                <MetaTags/>
            </head>
            <body>
                <App/>
            </body>
        </html>
    }
}

/// The console's root component.
#[component]
pub fn App() -> impl IntoView {
    provide_meta_context();
    // Effects run only in the browser, so this flips once the page is hydrated and
    // interactive. Tests (and people) can tell a live page from a server-rendered one.
    let (hydrated, set_hydrated) = signal(false);
    Effect::new(move |_| set_hydrated.set(true));
    let user = UserResource(Resource::new(|| (), |()| current_user()));
    provide_context(user);

    view! {
        <Stylesheet id="leptos" href="/pkg/sluice.css"/>
        <Title text="Sluice"/>
        <Router>
            // Moves the focus itself: the router would otherwise take the click as a navigation.
            <a class="skip-link" href="#main" on:click=|ev| {
                ev.prevent_default();
                focus_soon("main");
            }>"Skip to content"</a>
            <Header hydrated=hydrated user=user/>
            <main id="main" tabindex="-1">
                <Routes fallback=|| view! { <NotFound/> }>
                    <Route path=path!("/") view=HomePage/>
                    <Route path=path!("/sign-in") view=SignInPage/>
                    <Route path=path!("/account") view=AccountPage ssr=SsrMode::Async/>
                    // The management pages wait for their data on the server and arrive as one
                    // complete document, readable before (and without) any script.
                    // Each is behind its `Gate`: sign-in first, operators' pages for operators,
                    // a tenant's pages for those who may see that tenant.
                    <Route path=path!("/tenants") view=|| view! { <Gate need=Need::Operator><TenantsPage/></Gate> } ssr=SsrMode::Async/>
                    <Route path=path!("/audit") view=|| view! { <Gate need=Need::Operator><PlatformAuditPage/></Gate> } ssr=SsrMode::Async/>
                    <Route path=path!("/users") view=|| view! { <Gate need=Need::Operator><UsersPage/></Gate> } ssr=SsrMode::Async/>
                    <Route path=path!("/dashboard") view=|| view! { <Gate need=Need::Operator><FleetDashboardPage/></Gate> } ssr=SsrMode::Async/>
                    <Route path=path!("/tenants/:tenant/dashboard") view=|| view! { <Gate need=Need::Tenant><TenantDashboardPage/></Gate> } ssr=SsrMode::Async/>
                    <Route path=path!("/tenants/:tenant/rules") view=|| view! { <Gate need=Need::Tenant><RulesPage/></Gate> } ssr=SsrMode::Async/>
                    <Route path=path!("/tenants/:tenant/rules/file") view=|| view! { <Gate need=Need::Tenant><RulesFilePage/></Gate> } ssr=SsrMode::Async/>
                    <Route path=path!("/tenants/:tenant/keys") view=|| view! { <Gate need=Need::Tenant><KeysPage/></Gate> } ssr=SsrMode::Async/>
                    <Route path=path!("/tenants/:tenant/audit") view=|| view! { <Gate need=Need::Tenant><TenantAuditPage/></Gate> } ssr=SsrMode::Async/>
                    <Route path=path!("/tenants/:tenant/simulate") view=|| view! { <Gate need=Need::Tenant><SimulatePage/></Gate> } ssr=SsrMode::Async/>
                    <Route path=path!("/tenants/:tenant/admins") view=|| view! { <Gate need=Need::Tenant><TenantAdminsPage/></Gate> } ssr=SsrMode::Async/>
                </Routes>
            </main>
        </Router>
    }
}

/// The header: the brand, the role's links and the account. On a phone, once the page is live,
/// the links fold into a menu that a button opens; Escape or following a link closes it.
#[component]
fn Header(hydrated: ReadSignal<bool>, user: UserResource) -> impl IntoView {
    let open = RwSignal::new(false);
    let button = NodeRef::<leptos::html::Button>::new();
    let on_key = move |ev: leptos::ev::KeyboardEvent| {
        if ev.key() == "Escape" && open.get_untracked() {
            open.set(false);
            if let Some(button) = button.get_untracked() {
                let _ = button.focus();
            }
        }
    };
    view! {
        <header class="top" on:keydown=on_key data-live=move || hydrated.get().to_string()
            data-menu=move || if open.get() { "open" } else { "closed" }>
            <A href="/" attr:class="brand">"Sluice"</A>
            <span class="hydration" data-testid="hydration" data-hydrated=move || hydrated.get().to_string()>
                // Only while the page is not yet interactive: "live" here once read as if the
                // dashboards' stream were live, whatever it was doing.
                {move || (!hydrated.get()).then_some("loading…")}
            </span>
            <button type="button" class="menu-button secondary" node_ref=button aria-controls="main-nav"
                aria-expanded=move || open.get().to_string() on:click=move |_| open.update(|o| *o = !*o)>"Menu"</button>
            // Following a link closes the menu.
            <nav id="main-nav" aria-label="Main" on:click=move |_| open.set(false)>
                <Transition fallback=|| ()>
                    {move || user.0.get().map(|reading| view! { <MainNav user=reading.ok().flatten()/> })}
                </Transition>
            </nav>
        </header>
    }
}

/// The links a user's role gives them.
#[component]
fn MainNav(user: Option<SignedInUser>) -> impl IntoView {
    match user {
        None => view! { <A href="/sign-in">"Sign in"</A> }.into_any(),
        Some(user) => {
            let role_links = match user.tenant_id.clone() {
                Some(t) if user.role != Role::Operator => view! {
                    <A href=format!("/tenants/{t}/dashboard")>"Dashboard"</A>
                    <A href=format!("/tenants/{t}/rules")>"Rules"</A>
                    <A href=format!("/tenants/{t}/keys")>"Keys"</A>
                    <A href=format!("/tenants/{t}/audit")>"Audit log"</A>
                    <A href=format!("/tenants/{t}/simulate")>"Simulate"</A>
                    <A href=format!("/tenants/{t}/admins")>"Admins"</A>
                }
                .into_any(),
                _ => view! {
                    <A href="/dashboard">"Dashboard"</A>
                    <A href="/tenants">"Tenants"</A>
                    <A href="/users">"Users"</A>
                    <A href="/audit">"Audit log"</A>
                }
                .into_any(),
            };
            view! {
                {role_links}
                <span class="spacer"></span>
                <A href="/account" attr:data-testid="nav-account">{user.email.clone()}</A>
            }
            .into_any()
        }
    }
}

#[component]
fn HomePage() -> impl IntoView {
    let user = expect_context::<UserResource>();
    view! {
        <h1>"Sluice console"</h1>
        <p class="lead">
            "Rate-limit decisions for your services, in one Redis round trip. "
            "Rules and keys are managed per tenant."
        </p>
        <Transition fallback=|| ()>
            {move || user.0.get().map(|reading| match reading.ok().flatten() {
                None => view! {
                    <p><a href="/sign-in">"Sign in"</a>" to manage tenants, rules and keys."</p>
                }.into_any(),
                Some(u) => match u.tenant_id.filter(|_| u.role != Role::Operator) {
                    Some(t) => view! {
                        <p>"Go to your tenant's " <a href=format!("/tenants/{t}/rules")>"rules"</a>
                        " or " <a href=format!("/tenants/{t}/keys")>"keys"</a> "."</p>
                    }.into_any(),
                    None => view! { <p>"Go to the " <a href="/tenants">"tenants"</a> "."</p> }.into_any(),
                },
            })}
        </Transition>
        <StatusWidget/>
    }
}

#[component]
fn NotFound() -> impl IntoView {
    #[cfg(feature = "ssr")]
    {
        if let Some(response) = use_context::<leptos_axum::ResponseOptions>() {
            response.set_status(http::StatusCode::NOT_FOUND);
        }
    }
    view! {
        <h1>"Not found"</h1>
        <p>"There is no page here. " <a href="/">"Go to the console home."</a></p>
    }
}
