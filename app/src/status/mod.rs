//! The status widget: which mode this instance runs in and whether its dependencies answer.
//! It is rendered on the server, hydrated, and refreshed through a server function.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

use crate::error::AppError;

/// What an instance reports about itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    /// The server's version, for signed-in users only (`None` for anyone else: a version
    /// tells an attacker which known flaws to try).
    pub version: Option<String>,
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

/// What this feature's server functions need from the server (which implements it). Acting
/// calls act as the session's user: an operator on any tenant, a tenant admin on their own
/// tenant only (any other tenant is `NotFound`); without a session they are `Unauthorized`.
#[cfg(feature = "ssr")]
#[async_trait::async_trait]
pub trait StatusPort: Send + Sync + 'static {
    /// The instance's configuration and whether its dependencies answer.
    async fn status(&self) -> Result<Status, AppError>;
}

/// Reads the instance status.
#[server(prefix = "/api", endpoint = "status")]
pub async fn get_status() -> Result<Status, AppError> {
    crate::context::port::<dyn StatusPort>()?.status().await
}

/// Shows the status and refreshes it on request.
#[component]
pub fn StatusWidget() -> impl IntoView {
    // Read on the server during rendering; the browser reuses that reading when it hydrates.
    let initial = Resource::new(|| (), |()| get_status());
    // Later readings come from this action, whose pending state is false on the server too,
    // so the hydrated button matches the server-rendered one.
    let refresh = Action::new(|_: &()| get_status());
    let (readings, set_readings) = signal(1_u32);

    view! {
        <section class="card status" aria-labelledby="status-title">
            <h2 id="status-title">"Instance"</h2>
            <Transition fallback=|| view! { <p class="muted">"Reading status…"</p> }>
                {move || {
                    let reading = refresh.value().get().or_else(|| initial.get());
                    reading.map(|reading| match reading {
                        Ok(s) => view! { <StatusTable status=s/> }.into_any(),
                        Err(e) => view! {
                            <p class="error" role="alert">{format!("Could not read the status: {e}")}</p>
                        }.into_any(),
                    })
                }}
            </Transition>
            <p class="actions">
                <button
                    type="button"
                    data-testid="refresh-status"
                    disabled=move || refresh.pending().get()
                    on:click=move |_| {
                        set_readings.update(|n| *n += 1);
                        refresh.dispatch(());
                    }
                >
                    "Check again"
                </button>
                <span class="muted" data-testid="status-checks">
                    {move || format!("readings: {}", readings.get())}
                </span>
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
            <dt>"Checked at"</dt>
            <dd data-testid="status-checked-at" data-ms=status.checked_at_ms>
                {utc_time_of_day(status.checked_at_ms)}
            </dd>
            <dt>"Version"</dt><dd>{status.version.unwrap_or_else(|| "(shown when signed in)".to_owned())}</dd>
        </dl>
    }
}

/// `HH:MM:SS.mmm UTC` for a Unix time in milliseconds.
fn utc_time_of_day(ms: i64) -> String {
    let in_day = ms.rem_euclid(86_400_000);
    let (h, m, s, milli) = (
        in_day / 3_600_000,
        in_day / 60_000 % 60,
        in_day / 1000 % 60,
        in_day % 1000,
    );
    format!("{h:02}:{m:02}:{s:02}.{milli:03} UTC")
}

#[cfg(test)]
mod tests {
    use super::utc_time_of_day;

    #[test]
    fn times_of_day_are_formatted_in_utc() {
        assert_eq!(utc_time_of_day(0), "00:00:00.000 UTC");
        // 2026-11-30T00:41:23.456Z
        assert_eq!(utc_time_of_day(1_795_999_283_456), "00:41:23.456 UTC");
        assert_eq!(utc_time_of_day(86_399_999), "23:59:59.999 UTC");
    }
}
