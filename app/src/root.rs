//! The HTML document, the router, and the navigation that follows the user's role.

use leptos::prelude::*;
use leptos_meta::{provide_meta_context, MetaTags, Stylesheet, Title};
use leptos_router::components::{Route, Router, Routes, A};
use leptos_router::{lazy_route, path, Lazy, LazyRoute, SsrMode};

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
    // Flipped by the route's own view once it is hydrated and interactive (see `mark_live`).
    // Tests (and people) can tell a live page from a server-rendered one.
    let (hydrated, set_hydrated) = signal(false);
    provide_context(Live(set_hydrated));
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
                    <Route path=path!("/") view={Lazy::<HomeRoute>::new()}/>
                    <Route path=path!("/sign-in") view={Lazy::<SignInRoute>::new()}/>
                    <Route path=path!("/account") view={Lazy::<AccountRoute>::new()} ssr=SsrMode::Async/>
                    // The management pages wait for their data on the server and arrive as one
                    // complete document, readable before (and without) any script.
                    // Each is behind its `Gate`: sign-in first, operators' pages for operators,
                    // a tenant's pages for those who may see that tenant.
                    <Route path=path!("/tenants") view={Lazy::<TenantsRoute>::new()} ssr=SsrMode::Async/>
                    <Route path=path!("/audit") view={Lazy::<PlatformAuditRoute>::new()} ssr=SsrMode::Async/>
                    <Route path=path!("/users") view={Lazy::<UsersRoute>::new()} ssr=SsrMode::Async/>
                    <Route path=path!("/dashboard") view={Lazy::<FleetDashboardRoute>::new()} ssr=SsrMode::Async/>
                    <Route path=path!("/tenants/:tenant/dashboard") view={Lazy::<TenantDashboardRoute>::new()} ssr=SsrMode::Async/>
                    <Route path=path!("/tenants/:tenant/rules") view={Lazy::<RulesRoute>::new()} ssr=SsrMode::Async/>
                    <Route path=path!("/tenants/:tenant/rules/file") view={Lazy::<RulesFileRoute>::new()} ssr=SsrMode::Async/>
                    <Route path=path!("/tenants/:tenant/keys") view={Lazy::<KeysRoute>::new()} ssr=SsrMode::Async/>
                    <Route path=path!("/tenants/:tenant/audit") view={Lazy::<TenantAuditRoute>::new()} ssr=SsrMode::Async/>
                    <Route path=path!("/tenants/:tenant/simulate") view={Lazy::<SimulateRoute>::new()} ssr=SsrMode::Async/>
                    <Route path=path!("/tenants/:tenant/admins") view={Lazy::<TenantAdminsRoute>::new()} ssr=SsrMode::Async/>
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

/// Marks the page live.
#[derive(Debug, Clone, Copy)]
struct Live(WriteSignal<bool>);

/// Called by every route's view: effects run only in the browser, after the view they belong
/// to is hydrated, so on a fresh load the header's `data-hydrated` turns "true" once this
/// page's own buttons work. A flag set by `App` itself would flip while a lazy page's chunk is
/// still loading. It is never reset: after a navigation in the browser it stays "true" while
/// the next page's chunk loads.
fn mark_live() {
    if let Some(Live(set)) = use_context::<Live>() {
        Effect::new(move |_| set.set(true));
    }
}

/// A page whose code the browser loads only when it is shown. Each route's view is a lazy
/// function: `cargo leptos build --split` moves it, and all the code only it reaches, into WASM
/// chunks of its own, fetched when the router first shows the page, and named in preload links
/// when the server renders it, so that the browser fetches them alongside the main module. The
/// header and the not-found page stay in the main module, which every page loads.
///
/// Leptos 0.8.23 writes those preload links itself for a streamed page (`streamed`: home and
/// sign-in), but for one rendered with `SsrMode::Async` (the others) only on some requests, so
/// for those `preload_chunks` writes them (a chunk named twice is still fetched once).
macro_rules! lazy_page {
    (streamed $route:ident => $page:expr) => {
        lazy_page!(@page $route, false, $page);
    };
    ($route:ident => $page:expr) => {
        lazy_page!(@page $route, true, $page);
    };
    (@page $route:ident, $preload:tt, $page:expr) => {
        #[derive(Debug)]
        struct $route;

        #[lazy_route]
        impl LazyRoute for $route {
            fn data() -> Self {
                $route
            }

            fn view(_this: Self) -> AnyView {
                #[cfg(feature = "ssr")]
                if $preload {
                    preload_chunks(stringify!($route));
                }
                mark_live();
                $page.into_any()
            }
        }
    };
}

/// The split manifest's name for a lazy route's view, without the hash Leptos appends:
/// `SignInRoute` → `__sign_in_route_view_`.
#[cfg(feature = "ssr")]
fn split_name_prefix(route: &str) -> String {
    let mut name = String::from("__");
    for (i, c) in route.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            name.push('_');
        }
        name.push(c.to_ascii_lowercase());
    }
    name.push_str("_view_");
    name
}

/// Adds to the page's head a preload link for every WASM chunk the split manifest lists for the
/// route's view, and one for the chunk loader, as Leptos does for a streamed page. Without them
/// the browser learns of the chunks only once the main module runs (docs/BENCHMARKS.md, "The
/// console's first load"). Does nothing when the build is not split.
#[cfg(feature = "ssr")]
fn preload_chunks(route: &str) {
    use leptos_meta::Link;
    let Some(manifest) = use_context::<leptos::WasmSplitManifest>() else {
        return;
    };
    let Some(manifest) = manifest.0.try_read_value() else {
        return;
    };
    let (pkg, chunks, loader) = &*manifest;
    let prefix = split_name_prefix(route);
    let modules = chunks
        .iter()
        .filter(|(name, _)| {
            name.strip_prefix(&prefix)
                .is_some_and(|hash| !hash.is_empty() && hash.bytes().all(|b| b.is_ascii_digit()))
        })
        .flat_map(|(_, modules)| modules);
    // `to_html` on a leptos_meta tag registers it with the document's head.
    for module in modules {
        let _ = view! {
            <Link rel="preload" href=format!("{pkg}/{module}.wasm") as_="fetch"
                type_="application/wasm" crossorigin=""/>
        }
        .to_html();
    }
    let _ = view! { <Link rel="modulepreload" href=format!("{pkg}/{loader}") crossorigin=""/> }
        .to_html();
}

lazy_page!(streamed HomeRoute => view! { <HomePage/> });
lazy_page!(streamed SignInRoute => view! { <SignInPage/> });
lazy_page!(AccountRoute => view! { <AccountPage/> });
lazy_page!(TenantsRoute => view! { <Gate need=Need::Operator><TenantsPage/></Gate> });
lazy_page!(PlatformAuditRoute => view! { <Gate need=Need::Operator><PlatformAuditPage/></Gate> });
lazy_page!(UsersRoute => view! { <Gate need=Need::Operator><UsersPage/></Gate> });
lazy_page!(FleetDashboardRoute => view! { <Gate need=Need::Operator><FleetDashboardPage/></Gate> });
lazy_page!(TenantDashboardRoute => view! { <Gate need=Need::Tenant><TenantDashboardPage/></Gate> });
lazy_page!(RulesRoute => view! { <Gate need=Need::Tenant><RulesPage/></Gate> });
lazy_page!(RulesFileRoute => view! { <Gate need=Need::Tenant><RulesFilePage/></Gate> });
lazy_page!(KeysRoute => view! { <Gate need=Need::Tenant><KeysPage/></Gate> });
lazy_page!(TenantAuditRoute => view! { <Gate need=Need::Tenant><TenantAuditPage/></Gate> });
lazy_page!(SimulateRoute => view! { <Gate need=Need::Tenant><SimulatePage/></Gate> });
lazy_page!(TenantAdminsRoute => view! { <Gate need=Need::Tenant><TenantAdminsPage/></Gate> });

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
    mark_live();
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

#[cfg(all(test, feature = "ssr"))]
mod tests {
    use super::split_name_prefix;

    #[test]
    fn a_routes_split_name_is_its_snake_case_view() {
        assert_eq!(split_name_prefix("SignInRoute"), "__sign_in_route_view_");
        assert_eq!(
            split_name_prefix("TenantAdminsRoute"),
            "__tenant_admins_route_view_"
        );
    }
}
