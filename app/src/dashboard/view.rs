//! The dashboard pages. The first frame comes with the page (rendered on the server); once the
//! page is live it opens an `EventSource` on `/live/dashboard` and shows each pushed frame.

use leptos::prelude::*;

use super::{dashboard_frame, DeniedSubjects, Range};
use crate::simulate::{ResetBucket, ResetInput};
use crate::tenants::view::TenantTabs;
use crate::ui::{use_tenant, ConfirmButton, ErrorNote};

/// The operator's view of the whole fleet.
#[component]
pub fn FleetDashboardPage() -> impl IntoView {
    view! {
        <h1>"Fleet dashboard"</h1>
        <p class="lead">
            "Decisions, denials, Redis latency and active buckets of every instance, updated every second."
        </p>
        <Dashboard tenant=Signal::derive(|| None)/>
    }
}

/// One tenant's own policies.
#[component]
pub fn TenantDashboardPage() -> impl IntoView {
    let tenant = use_tenant();
    view! {
        <TenantTabs tenant=tenant current="dashboard"/>
        <Dashboard tenant=Signal::derive(move || Some(tenant.get()))/>
        <ResetDenied tenant=tenant/>
    }
}

/// Clearing the bucket of one of the tenant's most denied subjects. The list is read when
/// asked for, not pushed every second like the frame above it, so that a button never moves
/// or loses the focus while it is being used.
#[component]
fn ResetDenied(tenant: Memo<String>) -> impl IntoView {
    let load = ServerAction::<DeniedSubjects>::new();
    let reset = ServerAction::<ResetBucket>::new();
    let read = move || {
        load.dispatch(DeniedSubjects {
            tenant: tenant.get_untracked(),
        });
    };
    // A reset answered: read the list again (the subject's count stays, its bucket is full).
    Effect::new(move |_| {
        if let Some(Ok(_)) = reset.value().get() {
            read();
        }
    });
    // Another tenant on the same page: nothing of the last one's stays on screen.
    Effect::new(move |previous: Option<String>| {
        let now = tenant.get();
        if previous.is_some_and(|p| p != now) {
            load.value().set(None);
            reset.value().set(None);
        }
        now
    });
    view! {
        <section class="card" aria-labelledby="reset-denied-title">
            <h2 id="reset-denied-title">"Reset a denied subject"</h2>
            <p class="muted">
                "Clears one bucket of the most denied subjects of the last 5 minutes on every instance: its next check starts full. The counts of denials stay."
            </p>
            <button type="button" class="secondary" data-testid="load-denied"
                disabled=move || load.pending().get() on:click=move |_| read()>
                "Show the most denied subjects"
            </button>
            <div role="status" data-testid="reset-denied-outcome">
                {move || reset.value().get().map(|r| match r {
                    Ok(done) => {
                        let whose = done.subject.map_or_else(
                            || "the whole tenant".to_owned(),
                            |s| format!("subject {s}"),
                        );
                        let what = if done.cleared { "cleared" } else { "already empty" };
                        view! { <p class="ok">{format!("The bucket of {whose} under {} is {what}.", done.policy)}</p> }.into_any()
                    }
                    Err(e) => view! { <ErrorNote error=e/> }.into_any(),
                })}
            </div>
            {move || load.value().get().map(|r| match r {
                Ok(rows) if rows.is_empty() => view! {
                    <p class="muted" data-testid="no-denied">"No denials in the last 5 minutes."</p>
                }.into_any(),
                Ok(rows) => view! {
                    <table class="grid" data-testid="reset-denied">
                        <thead><tr><th>"Policy"</th><th>"Subject"</th><th class="num">"Denied"</th><th>"Bucket"</th></tr></thead>
                        <tbody>
                            {rows.into_iter().enumerate().map(|(i, row)| {
                                let whose = row.subject.clone().map_or_else(
                                    || "the whole tenant's".to_owned(),
                                    |s| format!("{s}'s"),
                                );
                                let question = format!("Clear {whose} bucket of {} on every instance?", row.policy);
                                let (rule_id, subject) = (row.rule_id.clone(), row.subject.clone());
                                let on_confirm = Callback::new(move |()| {
                                    reset.dispatch(ResetBucket {
                                        tenant: tenant.get_untracked(),
                                        rule_id: rule_id.clone(),
                                        input: ResetInput { subject: subject.clone() },
                                    });
                                });
                                let counted = if row.error == 0 {
                                    row.denied.to_string()
                                } else {
                                    format!("{} to {}", row.denied, row.denied + row.error)
                                };
                                view! {
                                    <tr>
                                        <td>{row.policy.clone()}</td>
                                        <td>{row.subject.clone().map_or_else(
                                            || view! { <span class="muted">"(the tenant-wide bucket)"</span> }.into_any(),
                                            |s| view! { <code>{s}</code> }.into_any(),
                                        )}</td>
                                        <td class="num">{counted}</td>
                                        <td><ConfirmButton label="Reset".to_owned() question=question
                                            on_confirm=on_confirm testid=format!("reset-denied-{i}")/></td>
                                    </tr>
                                }
                            }).collect_view()}
                        </tbody>
                    </table>
                }.into_any(),
                Err(e) => view! { <ErrorNote error=e/> }.into_any(),
            })}
        </section>
    }
}

/// How long without a frame (ms) before a live stream is said to be stale: frames come every
/// second.
const STALE_MS: f64 = 3_500.0;

/// What the live connection is doing, for the status badge (only the browser changes it).
#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Link {
    /// Server-rendered; the browser has not connected yet.
    Waiting,
    Connecting,
    Live,
    Reconnecting,
    /// The server refused the stream (signed out, or no access).
    Stopped,
}

impl Link {
    fn as_str(self) -> &'static str {
        match self {
            Link::Waiting => "waiting",
            Link::Connecting => "connecting",
            Link::Live => "live",
            Link::Reconnecting => "reconnecting",
            Link::Stopped => "stopped",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Link::Waiting | Link::Connecting => "connecting…",
            Link::Live => "live: a new frame every second",
            Link::Reconnecting => "connection lost; reconnecting…",
            Link::Stopped => "updates stopped; reload the page (you may need to sign in again)",
        }
    }
}

/// What the status badge says (its `data-status`, its words) for the link's state and the
/// time since the last frame.
fn link_status(link: Link, silent_ms: f64) -> (&'static str, String) {
    match link {
        // The words change in steps, not every second: the badge is a live region, and a
        // screen reader would otherwise read it out at each tick.
        Link::Live if silent_ms > STALE_MS => {
            let step = [5.0, 10.0, 30.0, 60.0, 300.0]
                .into_iter()
                .rev()
                .find(|s| silent_ms >= s * 1000.0)
                .unwrap_or(STALE_MS / 1000.0);
            let time = if step >= 60.0 {
                format!("{} min", step / 60.0)
            } else {
                format!("{step} s")
            };
            (
                "stale",
                format!("no update for over {time}: the server may be busy or unreachable"),
            )
        }
        other => (other.as_str(), other.label().to_owned()),
    }
}

#[component]
fn Dashboard(tenant: Signal<Option<String>>) -> impl IntoView {
    let range = RwSignal::new(Range::default());
    let first = Resource::new(
        move || (tenant.get(), range.get()),
        |(tenant, range)| dashboard_frame(tenant, range),
    );
    let pushed = RwSignal::new(None::<String>);
    let link = RwSignal::new(Link::Waiting);
    // When the last frame arrived and the time now (ms, the browser's clock, ticking every
    // second): a stream that is open but silent is not called live.
    let last_frame = RwSignal::new(0.0_f64);
    let now = RwSignal::new(0.0_f64);
    #[cfg(feature = "hydrate")]
    live::connect(tenant, range, pushed, link, last_frame, now);
    let status = move || link_status(link.get(), now.get() - last_frame.get());

    let choose = move |r: Range| {
        if range.get_untracked() != r {
            pushed.set(None);
            range.set(r);
        }
    };
    view! {
        <div class="dash-bar">
            <div class="range" role="group" aria-label="Time range">
                {Range::ALL.map(|r| view! {
                    <button type="button" class="secondary" data-testid=format!("range-{}", r.as_str())
                        aria-pressed=move || (range.get() == r).to_string()
                        on:click=move |_| choose(r)>{r.as_str()}</button>
                }).collect_view()}
            </div>
            <span class="live-status" role="status" data-testid="live-status" data-status=move || status().0>
                {move || status().1}
            </span>
        </div>
        <Transition fallback=|| view! { <p class="muted">"Loading the dashboard…"</p> }>
            {move || match pushed.get() {
                Some(html) => view! { <div class="frame" inner_html=html></div> }.into_any(),
                None => first.get().map(|reading| match reading {
                    Ok(html) => view! { <div class="frame" inner_html=html></div> }.into_any(),
                    Err(e) => view! { <ErrorNote error=e/> }.into_any(),
                }).into_any(),
            }}
        </Transition>
    }
}

#[cfg(feature = "hydrate")]
mod live {
    use std::cell::RefCell;
    use std::rc::Rc;

    use leptos::prelude::*;
    use send_wrapper::SendWrapper;
    use wasm_bindgen::prelude::*;
    use wasm_bindgen::JsCast;
    use web_sys::{Event, EventSource, MessageEvent};

    use super::{Link, Range};
    use std::time::Duration;

    /// An open stream and the callbacks it calls (kept alive as long as it is open).
    struct Open {
        source: EventSource,
        _on_frame: Closure<dyn FnMut(MessageEvent)>,
        _on_error: Closure<dyn FnMut(Event)>,
    }

    type Slot = Rc<RefCell<Option<Open>>>;

    fn close(slot: &Slot) {
        if let Some(open) = slot.borrow_mut().take() {
            open.source.close();
        }
    }

    /// Follows `/live/dashboard` for the current tenant and range; a new range reconnects,
    /// leaving the page closes the stream.
    pub fn connect(
        tenant: Signal<Option<String>>,
        range: RwSignal<Range>,
        pushed: RwSignal<Option<String>>,
        link: RwSignal<Link>,
        last_frame: RwSignal<f64>,
        now: RwSignal<f64>,
    ) {
        let tick =
            set_interval_with_handle(move || now.set(js_sys::Date::now()), Duration::from_secs(1))
                .ok();
        let slot: Slot = Rc::default();
        let effect_slot = slot.clone();
        Effect::new(move |_| {
            let range = range.get().as_str();
            let url = match tenant.get() {
                Some(t) => format!(
                    "/live/dashboard?tenant={}&range={range}",
                    String::from(js_sys::encode_uri_component(&t))
                ),
                None => format!("/live/dashboard?range={range}"),
            };
            close(&effect_slot);
            link.set(Link::Connecting);
            let Ok(source) = EventSource::new(&url) else {
                link.set(Link::Stopped);
                return;
            };
            let on_frame = Closure::<dyn FnMut(MessageEvent)>::new(move |ev: MessageEvent| {
                if let Some(html) = ev.data().as_string() {
                    let at = js_sys::Date::now();
                    last_frame.set(at);
                    now.set(at);
                    pushed.set(Some(html));
                    link.set(Link::Live);
                }
            });
            let _ =
                source.add_event_listener_with_callback("frame", on_frame.as_ref().unchecked_ref());
            let watched = source.clone();
            let on_error = Closure::<dyn FnMut(Event)>::new(move |_: Event| {
                // CLOSED: the server refused; the browser will not retry.
                link.set(if watched.ready_state() == EventSource::CLOSED {
                    Link::Stopped
                } else {
                    Link::Reconnecting
                });
            });
            source.set_onerror(Some(on_error.as_ref().unchecked_ref()));
            *effect_slot.borrow_mut() = Some(Open {
                source,
                _on_frame: on_frame,
                _on_error: on_error,
            });
        });
        let cleanup = SendWrapper::new(slot);
        on_cleanup(move || {
            close(&cleanup);
            if let Some(tick) = tick {
                tick.clear();
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::{link_status, Link};

    #[test]
    fn a_stream_that_falls_silent_is_not_called_live() {
        assert_eq!(link_status(Link::Live, 900.0).0, "live");
        let (status, words) = link_status(Link::Live, 5_200.0);
        assert_eq!(status, "stale");
        assert!(words.starts_with("no update for over 5 s"), "{words}");
        // Said again only at the next step, so a screen reader is not told every second.
        assert_eq!(link_status(Link::Live, 9_900.0).1, words);
        assert!(link_status(Link::Live, 3_600.0)
            .1
            .starts_with("no update for over 3.5 s"));
        assert!(link_status(Link::Live, 61_000.0)
            .1
            .starts_with("no update for over 1 min"));
        assert_eq!(link_status(Link::Reconnecting, 60_000.0).0, "reconnecting");
        assert_eq!(link_status(Link::Stopped, 0.0).0, "stopped");
    }
}
