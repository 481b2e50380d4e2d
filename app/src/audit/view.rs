//! The audit log pages: one tenant's events, and (operators) the whole platform's.

use leptos::ev::SubmitEvent;
use leptos::prelude::*;

use super::describe::describe;
use super::{AuditEntry, AuditFilter, ACTIONS, AUDIT_PAGE};
use crate::tenants::view::TenantTabs;
use crate::ui::{format_utc, parse_utc, use_tenant, ErrorNote};

/// One tenant's audit log.
#[component]
pub fn TenantAuditPage() -> impl IntoView {
    let tenant = use_tenant();
    view! {
        <TenantTabs tenant=tenant current="audit"/>
        <AuditLog tenant=Signal::derive(move || Some(tenant.get()))/>
    }
}

/// Every tenant's events and the platform's own (operators).
#[component]
pub fn PlatformAuditPage() -> impl IntoView {
    view! {
        <h1>"Audit log"</h1>
        <p class="lead">"Every change on this platform, newest first."</p>
        <AuditLog tenant=Signal::derive(|| None)/>
    }
}

/// The filters as the URL keeps them (`?actor=&action=&since=&until=&before=`), so a filtered
/// view can be linked to and survives a reload; `since` and `until` are the form's UTC text.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct UrlFilter {
    actor: String,
    action: String,
    since: String,
    until: String,
    before: Option<i64>,
}

impl UrlFilter {
    fn read(query: &leptos_router::params::ParamsMap) -> Self {
        let get = |k: &str| query.get(k).unwrap_or_default();
        Self {
            actor: get("actor"),
            action: get("action"),
            since: get("since"),
            until: get("until"),
            before: query.get("before").and_then(|b| b.parse().ok()),
        }
    }

    fn query(&self) -> String {
        let mut parts = Vec::new();
        for (k, v) in [
            ("actor", &self.actor),
            ("action", &self.action),
            ("since", &self.since),
            ("until", &self.until),
        ] {
            if !v.trim().is_empty() {
                parts.push(format!("{k}={}", encode(v.trim())));
            }
        }
        if let Some(before) = self.before {
            parts.push(format!("before={before}"));
        }
        if parts.is_empty() {
            String::new()
        } else {
            format!("?{}", parts.join("&"))
        }
    }

    /// The filter the server applies, or what is wrong with the times.
    fn to_filter(&self) -> Result<AuditFilter, String> {
        let time = |text: &str| -> Result<Option<i64>, String> {
            if text.trim().is_empty() {
                Ok(None)
            } else {
                parse_utc(text).map(Some)
            }
        };
        // A "To" without seconds includes its whole minute.
        let whole_minute = if self.until.matches(':').count() == 1 {
            59_999
        } else {
            999
        };
        Ok(AuditFilter {
            actor: Some(self.actor.clone()),
            action: Some(self.action.clone()),
            since_ms: time(&self.since)?,
            until_ms: time(&self.until)?.map(|u| u + whole_minute),
            before_id: self.before,
        }
        .normalized())
    }
}

/// Percent-encodes a query value.
fn encode(value: &str) -> String {
    let mut out = String::new();
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || b"-_.~:@".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[component]
fn AuditLog(tenant: Signal<Option<String>>) -> impl IntoView {
    let query = leptos_router::hooks::use_query_map();
    let location = leptos_router::hooks::use_location();
    let navigate = leptos_router::hooks::use_navigate();
    let url = Memo::new(move |_| query.with(UrlFilter::read));
    let applied = Memo::new(move |_| url.with(UrlFilter::to_filter));
    let events = Resource::new(
        move || (tenant.get(), applied.get()),
        |(tenant, filter)| async move {
            match filter {
                Ok(filter) => super::list_audit(tenant, filter).await,
                Err(_) => Ok(Vec::new()),
            }
        },
    );
    let start = url.get_untracked();
    let actor = RwSignal::new(start.actor);
    let action = RwSignal::new(start.action);
    let since = RwSignal::new(start.since);
    let until = RwSignal::new(start.until);
    // The fields say what the URL filters by, after Back and Forward too.
    Effect::new(move |_| {
        let now = url.get();
        actor.set(now.actor);
        action.set(now.action);
        since.set(now.since);
        until.set(now.until);
    });
    let go = move |filter: UrlFilter| {
        navigate(
            &format!("{}{}", location.pathname.get_untracked(), filter.query()),
            Default::default(),
        );
    };
    let on_filter = {
        let go = go.clone();
        move |ev: SubmitEvent| {
            ev.prevent_default();
            go(UrlFilter {
                actor: actor.get_untracked(),
                action: action.get_untracked(),
                since: since.get_untracked(),
                until: until.get_untracked(),
                before: None,
            });
        }
    };
    let clear = {
        let go = go.clone();
        move |_| {
            actor.set(String::new());
            action.set(String::new());
            since.set(String::new());
            until.set(String::new());
            go(UrlFilter::default());
        }
    };
    let filter_by_actor = Callback::new({
        let go = go.clone();
        move |who: String| {
            actor.set(who.clone());
            go(UrlFilter {
                actor: who,
                before: None,
                ..url.get_untracked()
            });
        }
    });
    let page_to = Callback::new(move |before: Option<i64>| {
        go(UrlFilter {
            before,
            ..url.get_untracked()
        });
    });

    view! {
        <section class="card" aria-labelledby="audit-filter-title">
            <h2 id="audit-filter-title">"Filter"</h2>
            <form class="filters" on:submit=on_filter data-testid="audit-filter">
                <span>
                    <label for="audit-actor">"Actor contains"</label>
                    <input id="audit-actor" placeholder="ops@example.com" autocomplete="off"
                        prop:value=actor on:input=move |ev| actor.set(event_target_value(&ev))/>
                </span>
                <span>
                    <label for="audit-action">"Action"</label>
                    <select id="audit-action" prop:value=action on:change=move |ev| action.set(event_target_value(&ev))>
                        <option value="">"any"</option>
                        {ACTIONS.into_iter().map(|a| view! { <option value=a>{a}</option> }).collect_view()}
                    </select>
                </span>
                <span>
                    <label for="audit-since">"From (UTC)"</label>
                    <input id="audit-since" type="datetime-local" prop:value=since on:input=move |ev| since.set(event_target_value(&ev))/>
                </span>
                <span>
                    <label for="audit-until">"To (UTC)"</label>
                    <input id="audit-until" type="datetime-local" prop:value=until on:input=move |ev| until.set(event_target_value(&ev))/>
                </span>
                <span class="buttons">
                    <button type="submit" data-testid="apply-filter">"Apply"</button>
                    <button type="button" class="secondary" on:click=clear>"Clear"</button>
                </span>
            </form>
            {move || applied.get().err().map(|p| view! { <p class="error" role="alert">{p}</p> })}
        </section>
        <section class="card" aria-labelledby="audit-title">
            <h2 id="audit-title">"Events"</h2>
            <Transition fallback=|| view! { <p class="muted">"Loading the audit log…"</p> }>
                {move || events.get().map(|reading| match reading {
                    Err(e) => view! { <ErrorNote error=e/> }.into_any(),
                    Ok(list) if list.is_empty() => view! {
                        <p class="muted" data-testid="no-events">"No events match."</p>
                        // A page after a full page may be empty: the way back stays.
                        {url.with_untracked(|u| u.before.is_some()).then(|| view! {
                            <p class="actions"><button type="button" class="secondary" data-testid="newest-events"
                                on:click=move |_| page_to.run(None)>"Newest events"</button></p>
                        })}
                    }.into_any(),
                    Ok(list) => {
                        let older = (list.len() >= AUDIT_PAGE).then(|| list.last().map(|e| e.id)).flatten();
                        let paged = url.with_untracked(|u| u.before.is_some());
                        view! {
                            <table class="grid" data-testid="audit-table">
                                <thead><tr>
                                    <th scope="col">"When (UTC)"</th><th scope="col">"Who"</th><th scope="col">"What"</th>
                                    <th scope="col">"Details"</th>
                                </tr></thead>
                                <tbody>
                                    {list.into_iter().map(|e| view! { <AuditRow event=e on_actor=filter_by_actor/> }).collect_view()}
                                </tbody>
                            </table>
                            <p class="actions">
                                {paged.then(|| view! {
                                    <button type="button" class="secondary" data-testid="newest-events"
                                        on:click=move |_| page_to.run(None)>"Newest events"</button>
                                })}
                                {older.map(|id| view! {
                                    <button type="button" class="secondary" data-testid="older-events"
                                        on:click=move |_| page_to.run(Some(id))>{format!("Older events (the next {AUDIT_PAGE})")}</button>
                                })}
                            </p>
                        }.into_any()
                    }
                })}
            </Transition>
        </section>
    }
}

#[component]
fn AuditRow(event: AuditEntry, on_actor: Callback<String>) -> impl IntoView {
    let actor = event.actor.clone();
    let said = describe(&event.action, &event.detail);
    view! {
        <tr data-testid="audit-row" data-action=event.action.clone() data-actor=event.actor.clone() data-id=event.id>
            <td data-testid="audit-at" data-ms=event.at>{format_utc(event.at)}</td>
            <td>
                <button type="button" class="link" title="Show only this actor's events"
                    on:click=move |_| on_actor.run(actor.clone())>{event.actor.clone()}</button>
            </td>
            <td data-testid="audit-what" title=event.target.clone().unwrap_or_default()>
                {said}<br/><code class="muted small">{event.action.clone()}</code>
            </td>
            <td>
                <details>
                    <summary>"Recorded"</summary>
                    <code class="small detail">{event.detail.clone()}</code>
                </details>
            </td>
        </tr>
    }
}
