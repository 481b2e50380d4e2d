//! Who may see a page, decided before any of it renders: without a session the page sends
//! the browser to sign-in (and back here afterwards); a page an operator alone may use says
//! so to anyone else (403) without its forms; a tenant's page of a tenant the user cannot see,
//! or that does not exist, is a real "not found" (404). The server answers these statuses to
//! the first request, so a page never looks like it works when it cannot.

use leptos::prelude::*;
use leptos_router::components::Redirect;

use crate::auth::Role;
use crate::error::AppError;
use crate::ui::use_tenant;

/// What a page needs of the user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// An operator.
    Operator,
    /// Someone who may see the route's `:tenant`: an operator, or that tenant's admin.
    Tenant,
}

#[cfg(feature = "ssr")]
fn answer_status(code: u16) {
    if let Some(response) = use_context::<leptos_axum::ResponseOptions>() {
        if let Ok(status) = http::StatusCode::from_u16(code) {
            response.set_status(status);
        }
    }
}

#[cfg(not(feature = "ssr"))]
fn answer_status(_code: u16) {}

/// `/sign-in?next=<this page>`.
fn sign_in_and_back() -> String {
    let location = leptos_router::hooks::use_location();
    // The router's `search` comes without its `?`.
    let search = location.search.get_untracked();
    let here = if search.is_empty() {
        location.pathname.get_untracked()
    } else {
        format!(
            "{}?{}",
            location.pathname.get_untracked(),
            search.trim_start_matches('?')
        )
    };
    let here = if here.starts_with('/') && !here.starts_with("//") {
        here
    } else {
        "/".to_owned()
    };
    let mut encoded = String::new();
    for byte in here.bytes() {
        if byte.is_ascii_alphanumeric() || b"-_.~/".contains(&byte) {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    format!("/sign-in?next={encoded}")
}

/// The page's `children` when the signed-in user may see it; otherwise what they may do.
#[component]
pub fn Gate(need: Need, children: ChildrenFn) -> impl IntoView {
    // Read afresh for each gated page: the header's copy may still be the one from before a
    // sign-in that just happened.
    let user = Resource::new(|| (), |()| crate::auth::current_user());
    let tenant = use_tenant();
    let tenant_info = Resource::new(
        move || (need == Need::Tenant).then(|| tenant.get()),
        |tenant| async move {
            match tenant {
                Some(t) => crate::tenants::get_tenant(t).await.map(Some),
                None => Ok(None),
            }
        },
    );
    let children = StoredValue::new(children);
    view! {
        <Transition fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || {
                let reading = user.get()?;
                let signed_in = match reading {
                    Ok(Some(user)) => user,
                    Ok(None) | Err(AppError::Unauthorized) => {
                        let to = sign_in_and_back();
                        return Some(view! {
                            <Redirect path=to.clone()/>
                            <p data-testid="signed-out">"Your session has ended. " <a href=to>"Sign in"</a> " to come back to this page."</p>
                        }.into_any());
                    }
                    Err(e) => {
                        answer_status(e.http_status());
                        return Some(view! { <crate::ui::ErrorNote error=e/> }.into_any());
                    }
                };
                match need {
                    Need::Operator if signed_in.role != Role::Operator => {
                        answer_status(403);
                        Some(view! {
                            <section class="card" data-testid="forbidden">
                                <h1>"Operators only"</h1>
                                <p>"This page is for operators of the platform. "
                                    <a href=signed_in.home()>"Go to your tenant's pages."</a></p>
                            </section>
                        }.into_any())
                    }
                    Need::Operator => Some(children.with_value(|c| c()).into_any()),
                    Need::Tenant => match tenant_info.get()? {
                        Ok(_) => Some(children.with_value(|c| c()).into_any()),
                        Err(AppError::Forbidden(why)) => {
                            answer_status(403);
                            Some(view! {
                                <section class="card" data-testid="forbidden">
                                    <h1>"Not available"</h1>
                                    <p>{why}</p>
                                </section>
                            }.into_any())
                        }
                        Err(AppError::NotFound) => {
                            answer_status(404);
                            Some(view! {
                                <section class="card" data-testid="not-found">
                                    <h1>"Not found"</h1>
                                    <p>"There is no such tenant, or it is not yours. "
                                        <a href=signed_in.home()>"Go to your pages."</a></p>
                                </section>
                            }.into_any())
                        }
                        Err(AppError::Unauthorized) => {
                            let to = sign_in_and_back();
                            Some(view! {
                                <Redirect path=to.clone()/>
                                <p data-testid="signed-out">"Your session has ended. " <a href=to>"Sign in"</a> " to come back to this page."</p>
                            }.into_any())
                        }
                        Err(e) => {
                            answer_status(e.http_status());
                            Some(view! { <crate::ui::ErrorNote error=e/> }.into_any())
                        }
                    },
                }
            }}
        </Transition>
    }
}
