//! The status widget: which mode this instance runs in and whether its dependencies answer.
//! It is rendered on the server, hydrated, and refreshed through a server function.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

use crate::error::AppError;

/// What an instance reports about itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    pub version: String,
    /// `embedded` or `distributed`.
    pub mode: String,
    /// `sqlite` or `postgres`.
    pub database: String,
    /// `in-process`, `redis` or `redis-cluster`.
    pub limiter: String,
    /// The dependencies that do not answer right now; empty when the instance is ready.
    pub down: Vec<String>,
    /// When the server took this reading, in Unix milliseconds.
    pub checked_at_ms: i64,
}

/// Reads the instance status.
#[server(prefix = "/api", endpoint = "status")]
pub async fn get_status() -> Result<Status, AppError> {
    crate::port::console()?.status().await
}

/// Shows the status and refreshes it on request.
#[component]
pub fn StatusWidget() -> impl IntoView {
    let refresh = Action::new(|_: &()| get_status());
    let status = Resource::new(move || refresh.version().get(), |_| get_status());
    let checks = move || refresh.version().get() + 1;

    view! {
        <section class="card status" aria-labelledby="status-title">
            <h2 id="status-title">"Instance"</h2>
            <Transition fallback=|| view! { <p class="muted">"Reading status…"</p> }>
                {move || status.get().map(|reading| match reading {
                    Ok(s) => view! { <StatusTable status=s/> }.into_any(),
                    Err(e) => view! {
                        <p class="error" role="alert">{format!("Could not read the status: {e}")}</p>
                    }.into_any(),
                })}
            </Transition>
            <p class="actions">
                <button
                    type="button"
                    data-testid="refresh-status"
                    disabled=move || refresh.pending().get()
                    on:click=move |_| { refresh.dispatch(()); }
                >
                    "Check again"
                </button>
                <span class="muted" data-testid="status-checks">{move || format!("readings: {}", checks())}</span>
            </p>
        </section>
    }
}

#[component]
fn StatusTable(status: Status) -> impl IntoView {
    let ready = status.down.is_empty();
    let readiness = if ready {
        "ready".to_owned()
    } else {
        format!("down: {}", status.down.join(", "))
    };
    view! {
        <dl class="status-table">
            <dt>"Mode"</dt><dd data-testid="status-mode">{status.mode}</dd>
            <dt>"Config store"</dt><dd data-testid="status-database">{status.database}</dd>
            <dt>"Limiter"</dt><dd data-testid="status-limiter">{status.limiter}</dd>
            <dt>"Readiness"</dt>
            <dd data-testid="status-ready" class:ok=ready class:bad=!ready>{readiness}</dd>
            <dt>"Checked at"</dt><dd data-testid="status-checked-at">{status.checked_at_ms}</dd>
            <dt>"Version"</dt><dd>{status.version}</dd>
        </dl>
    }
}
