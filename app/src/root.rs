//! The HTML document and the router.

use leptos::prelude::*;
use leptos_meta::{provide_meta_context, MetaTags, Stylesheet, Title};
use leptos_router::components::{Route, Router, Routes, A};
use leptos_router::path;

use crate::auth::{AccountPage, SignInPage};
use crate::status::StatusWidget;

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

    view! {
        <Stylesheet id="leptos" href="/pkg/sluice.css"/>
        <Title text="Sluice"/>
        <Router>
            <header class="top">
                <A href="/" attr:class="brand">"Sluice"</A>
                <nav>
                    <A href="/sign-in">"Sign in"</A>
                    <A href="/account">"Account"</A>
                </nav>
                <span class="hydration" data-testid="hydration" data-hydrated=move || hydrated.get().to_string()>
                    {move || if hydrated.get() { "live" } else { "loading…" }}
                </span>
            </header>
            <main>
                <Routes fallback=|| view! { <NotFound/> }>
                    <Route path=path!("/") view=HomePage/>
                    <Route path=path!("/sign-in") view=SignInPage/>
                    <Route path=path!("/account") view=AccountPage/>
                </Routes>
            </main>
        </Router>
    }
}

#[component]
fn HomePage() -> impl IntoView {
    view! {
        <h1>"Sluice console"</h1>
        <p class="lead">
            "Rate-limit decisions for your services, in one Redis round trip. "
            "Rules and keys are managed per tenant."
        </p>
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
