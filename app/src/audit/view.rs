//! The audit log pages: one tenant's events, and (operators) the whole platform's.

use leptos::ev::SubmitEvent;
use leptos::prelude::*;

use super::{AuditEntry, AuditFilter, ACTIONS};
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

#[component]
fn AuditLog(tenant: Signal<Option<String>>) -> impl IntoView {
    let applied = RwSignal::new(AuditFilter::default());
    let events = Resource::new(
        move || (tenant.get(), applied.get()),
        |(tenant, filter)| super::list_audit(tenant, filter),
    );
    let actor = RwSignal::new(String::new());
    let action = RwSignal::new(String::new());
    let since = RwSignal::new(String::new());
    let until = RwSignal::new(String::new());
    let (problem, set_problem) = signal(None::<String>);

    let time = |text: String| -> Result<Option<i64>, String> {
        if text.trim().is_empty() {
            Ok(None)
        } else {
            parse_utc(&text).map(Some)
        }
    };
    let on_filter = move |ev: SubmitEvent| {
        ev.prevent_default();
        let since_ms = time(since.get_untracked());
        // A "To" without seconds includes its whole minute.
        let until_text = until.get_untracked();
        let whole_minute = if until_text.matches(':').count() == 1 {
            59_999
        } else {
            999
        };
        let until_ms = time(until_text).map(|u| u.map(|ms| ms + whole_minute));
        match (since_ms, until_ms) {
            (Ok(since_ms), Ok(until_ms)) => {
                set_problem.set(None);
                applied.set(
                    AuditFilter {
                        actor: Some(actor.get_untracked()),
                        action: Some(action.get_untracked()),
                        since_ms,
                        until_ms,
                    }
                    .normalized(),
                );
            }
            (Err(e), _) | (_, Err(e)) => set_problem.set(Some(e)),
        }
    };
    let clear = move |_| {
        actor.set(String::new());
        action.set(String::new());
        since.set(String::new());
        until.set(String::new());
        set_problem.set(None);
        applied.set(AuditFilter::default());
    };
    let filter_by_actor = Callback::new(move |who: String| {
        actor.set(who.clone());
        applied.update(|f| f.actor = Some(who));
    });

    view! {
        <section class="card" aria-labelledby="audit-filter-title">
            <h2 id="audit-filter-title">"Filter"</h2>
            <form class="filters" on:submit=on_filter data-testid="audit-filter">
                <span>
                    <label for="audit-actor">"Actor"</label>
                    <input id="audit-actor" placeholder="user:ops@example.com" autocomplete="off"
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
            {move || problem.get().map(|p| view! { <p class="error" role="alert">{p}</p> })}
        </section>
        <section class="card" aria-labelledby="audit-title">
            <h2 id="audit-title">"Events"</h2>
            <Transition fallback=|| view! { <p class="muted">"Loading the audit log…"</p> }>
                {move || events.get().map(|reading| match reading {
                    Err(e) => view! { <ErrorNote error=e/> }.into_any(),
                    Ok(list) if list.is_empty() => view! { <p class="muted" data-testid="no-events">"No events match."</p> }.into_any(),
                    Ok(list) => view! {
                        <table class="grid" data-testid="audit-table">
                            <thead><tr>
                                <th scope="col">"When (UTC)"</th><th scope="col">"Who"</th><th scope="col">"Action"</th>
                                <th scope="col">"Target"</th><th scope="col">"Details"</th>
                            </tr></thead>
                            <tbody>
                                {list.into_iter().map(|e| view! { <AuditRow event=e on_actor=filter_by_actor/> }).collect_view()}
                            </tbody>
                        </table>
                    }.into_any(),
                })}
            </Transition>
        </section>
    }
}

#[component]
fn AuditRow(event: AuditEntry, on_actor: Callback<String>) -> impl IntoView {
    let actor = event.actor.clone();
    view! {
        <tr data-testid="audit-row" data-action=event.action.clone() data-actor=event.actor.clone()>
            <td data-testid="audit-at" data-ms=event.at>{format_utc(event.at)}</td>
            <td>
                <button type="button" class="link" title="Show only this actor's events"
                    on:click=move |_| on_actor.run(actor.clone())>{event.actor.clone()}</button>
            </td>
            <td><code>{event.action.clone()}</code></td>
            <td><code class="small">{event.target.clone().unwrap_or_default()}</code></td>
            <td><code class="small detail">{event.detail.clone()}</code></td>
        </tr>
    }
}
