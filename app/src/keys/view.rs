//! The keys page: keys generated and hashed in the browser, shown once; the list; rotation
//! with a grace period; revocation.

use leptos::ev::SubmitEvent;
use leptos::prelude::*;

use super::{
    CreateKey, GeneratedKey, KeyInfo, KeyKind, KeyState, RevokeKey, RotateKey, MAX_GRACE_SECONDS,
};
use crate::tenants::view::TenantTabs;
use crate::ui::{format_maybe, format_utc, human_ms, use_tenant, ConfirmButton, ErrorNote};

/// The units a rotation's grace period is given in.
const GRACE_UNITS: [(&str, u64); 4] = [
    ("seconds", 1),
    ("minutes", 60),
    ("hours", 3600),
    ("days", 86_400),
];

/// The lifetimes a new key may be given.
const LIFETIMES: [(&str, Option<u64>); 6] = [
    ("never (until revoked)", None),
    ("in 1 day", Some(86_400)),
    ("in 7 days", Some(7 * 86_400)),
    ("in 30 days", Some(30 * 86_400)),
    ("in 90 days", Some(90 * 86_400)),
    ("in 1 year", Some(365 * 86_400)),
];

/// A key that was just generated, kept in the page only until it is dismissed.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Reveal {
    plaintext: String,
    what: String,
    kind: KeyKind,
}

/// The seconds of a grace period typed as `amount` `unit`s, or what is wrong with it.
fn grace_seconds(amount: &str, unit: u64) -> Result<u64, String> {
    let amount = amount
        .trim()
        .parse::<u64>()
        .map_err(|_| "a whole number".to_owned())?;
    match amount.checked_mul(unit) {
        Some(seconds) if seconds <= MAX_GRACE_SECONDS => Ok(seconds),
        _ => Err("at most 30 days".to_owned()),
    }
}

/// What the state column says, in words: a key in its grace period says how long it has left.
fn state_words(key: &KeyInfo) -> String {
    match (key.state, key.expires_at) {
        (KeyState::Grace, Some(at)) => {
            let left = u64::try_from(at - key.listed_at).unwrap_or(0);
            format!("grace: {} left", human_ms(left))
        }
        (state, _) => state.as_str().to_owned(),
    }
}

/// The ready-to-paste command that uses a new key.
fn curl_example(origin: &str, tenant: &str, kind: KeyKind, key: &str) -> String {
    match kind {
        KeyKind::Check => format!(
            "curl -i {origin}/v1/check -H 'X-API-Key: {key}' -H 'Content-Type: application/json' -d '{{\"route\": \"POST /payments\", \"subject\": \"user-42\"}}'"
        ),
        _ => format!("curl -i {origin}/v1/admin/tenants/{tenant}/rules -H 'X-API-Key: {key}'"),
    }
}

/// A tenant's keys.
#[component]
pub fn KeysPage() -> impl IntoView {
    let tenant = use_tenant();
    let create = ServerAction::<CreateKey>::new();
    let rotate = ServerAction::<RotateKey>::new();
    let revoke = ServerAction::<RevokeKey>::new();
    let keys = Resource::new(
        move || {
            (
                tenant.get(),
                create.version().get(),
                rotate.version().get(),
                revoke.version().get(),
            )
        },
        |(t, ..)| super::list_keys(t),
    );
    // The plaintext of the newest key: generated here, never sent, shown until dismissed.
    let reveal = RwSignal::new(None::<Reveal>);
    let pending = RwSignal::new(None::<Reveal>);
    let (local_error, set_local_error) = signal(None::<String>);
    // Show a key only once the server has registered its hash; forget it if that failed.
    let settle = move |registered: bool| {
        if let Some(p) = pending.get_untracked() {
            if registered {
                reveal.set(Some(p));
            }
            pending.set(None);
        }
    };
    Effect::new(move |_| {
        if let Some(r) = create.value().get() {
            settle(r.is_ok());
        }
    });
    Effect::new(move |_| {
        if let Some(r) = rotate.value().get() {
            settle(r.is_ok());
        }
    });

    // One key at a time: its plaintext waits in `pending` until the server has its hash.
    let busy = Signal::derive(move || create.pending().get() || rotate.pending().get());
    let (kind, set_kind) = signal(KeyKind::Check);
    let (name, set_name) = signal(String::new());
    let (lifetime, set_lifetime) = signal(None::<u64>);
    let on_create = move |ev: SubmitEvent| {
        ev.prevent_default();
        if busy.get_untracked() {
            return;
        }
        set_local_error.set(None);
        match GeneratedKey::generate(kind.get_untracked()) {
            Ok(key) => {
                pending.set(Some(Reveal {
                    plaintext: key.plaintext.clone(),
                    what: format!(
                        "{} key {}",
                        kind.get_untracked().as_str(),
                        name.get_untracked()
                    ),
                    kind: kind.get_untracked(),
                }));
                reveal.set(None);
                create.dispatch(CreateKey {
                    tenant: tenant.get_untracked(),
                    kind: kind.get_untracked(),
                    name: name.get_untracked(),
                    hash: key.hash,
                    prefix: key.prefix,
                    expires_in_seconds: lifetime.get_untracked(),
                });
            }
            Err(e) => set_local_error.set(Some(e)),
        }
    };
    let on_rotate = Callback::new(move |(key, grace_seconds): (KeyInfo, u64)| {
        set_local_error.set(None);
        match GeneratedKey::generate(key.kind) {
            Ok(new) => {
                pending.set(Some(Reveal {
                    plaintext: new.plaintext.clone(),
                    what: format!("replacement for {} ({})", key.name, key.prefix),
                    kind: key.kind,
                }));
                reveal.set(None);
                rotate.dispatch(RotateKey {
                    tenant: tenant.get_untracked(),
                    key: key.id.clone(),
                    hash: new.hash,
                    prefix: new.prefix,
                    grace_seconds,
                });
            }
            Err(e) => set_local_error.set(Some(e)),
        }
    });

    // The list's filter: part of a name or prefix, and whether to show only working keys.
    let (filter_text, set_filter_text) = signal(String::new());
    let (working_only, set_working_only) = signal(false);

    view! {
        <TenantTabs tenant=tenant current="keys"/>
        <section class="card" aria-labelledby="new-key-title">
            <h2 id="new-key-title">"Create a key"</h2>
            <p class="muted">
                "The key is generated in your browser and shown once. Only its SHA-256 and its first 12 characters are sent to the server."
            </p>
            <form on:submit=on_create data-testid="key-form">
                <label for="key-kind">"Kind"</label>
                <select id="key-kind" on:change=move |ev| set_kind.set(KeyKind::parse(&event_target_value(&ev)).unwrap_or(KeyKind::Check))>
                    <option value="check">"check: for /v1/check"</option>
                    <option value="admin">"admin: for /v1/admin, this tenant only"</option>
                </select>
                <label for="key-name">"Name"</label>
                <input id="key-name" required maxlength="100" autocomplete="off" placeholder="payments-service"
                    prop:value=name on:input=move |ev| set_name.set(event_target_value(&ev))/>
                <label for="key-expires">"Expires"</label>
                <select id="key-expires" data-testid="key-expires"
                    on:change=move |ev| set_lifetime.set(event_target_value(&ev).parse().ok())>
                    {LIFETIMES.into_iter().map(|(words, seconds)| view! {
                        <option value=seconds.map(|s| s.to_string()).unwrap_or_default()>{words}</option>
                    }).collect_view()}
                </select>
                <button type="submit" data-testid="create-key" disabled=move || busy.get()>"Generate key"</button>
            </form>
            {move || local_error.get().map(|e| view! { <p class="error" role="alert">{e}</p> })}
            {move || create.value().get().and_then(Result::err).map(|e| view! { <ErrorNote error=e/> })}
            {move || rotate.value().get().and_then(Result::err).map(|e| view! { <ErrorNote error=e/> })}
            {move || reveal.get().map(|r| view! { <RevealBox reveal=r tenant=tenant.get_untracked() on_dismiss=Callback::new(move |()| reveal.set(None))/> })}
        </section>
        <section class="card" aria-labelledby="keys-title">
            <h2 id="keys-title">"Keys"</h2>
            <Transition fallback=|| view! { <p class="muted">"Loading keys…"</p> }>
                {move || keys.get().map(|reading| match reading {
                    Err(e) => view! { <ErrorNote error=e/> }.into_any(),
                    Ok(list) if list.is_empty() => view! { <p class="muted" data-testid="no-keys">"No keys yet."</p> }.into_any(),
                    Ok(list) => {
                        // Rotation links a key to its replacement: each row names the other.
                        let prefix_of = |id: &str| list.iter().find(|k| k.id == id).map(|k| k.prefix.clone());
                        let rows = list.iter().map(|k| {
                            let replaced_by = k.replaced_by.as_deref().and_then(prefix_of);
                            let replaces = list.iter().find(|old| old.replaced_by.as_deref() == Some(k.id.as_str())).map(|old| old.prefix.clone());
                            (k.clone(), replaced_by, replaces)
                        }).collect::<Vec<_>>();
                        let all = list.clone();
                        let shown = move |k: &KeyInfo| {
                            let text = filter_text.get().trim().to_lowercase();
                            (text.is_empty() || k.name.to_lowercase().contains(&text) || k.prefix.contains(&text))
                                && (!working_only.get() || matches!(k.state, KeyState::Live | KeyState::Grace))
                        };
                        view! {
                            <form class="filters" role="search" on:submit=|ev: SubmitEvent| ev.prevent_default()>
                                <span>
                                    <label for="key-filter">"Find"</label>
                                    <input id="key-filter" type="search" data-testid="key-filter" placeholder="name or prefix"
                                        prop:value=filter_text on:input=move |ev| set_filter_text.set(event_target_value(&ev))/>
                                </span>
                                <label class="switch"><input type="checkbox" data-testid="working-only" prop:checked=working_only
                                    on:change=move |ev| set_working_only.set(event_target_checked(&ev))/>" Working keys only"</label>
                            </form>
                            <table class="grid" data-testid="keys-table">
                                <thead><tr>
                                    <th scope="col">"Name"</th><th scope="col">"Key"</th><th scope="col">"Kind"</th>
                                    <th scope="col">"Created (UTC)"</th><th scope="col">"Expires"</th>
                                    <th scope="col">"Last used"</th><th scope="col">"State"</th><th scope="col">"Actions"</th>
                                </tr></thead>
                                <tbody>
                                    {rows.into_iter().map(|(k, replaced_by, replaces)| {
                                        let key = k.clone();
                                        view! {
                                            <Show when=move || shown(&key)>
                                                <KeyRow key=k.clone() replaced_by=replaced_by.clone() replaces=replaces.clone()
                                                    busy=busy on_rotate=on_rotate revoke=revoke tenant=tenant/>
                                            </Show>
                                        }
                                        // Type-erased: the page's view type is otherwise too deep for the compiler.
                                        .into_any()
                                    }).collect_view()}
                                </tbody>
                            </table>
                            <p class="muted" data-testid="keys-none-shown" hidden=move || all.iter().any(shown)>
                                "No key matches."
                            </p>
                        }.into_any()
                    }
                })}
            </Transition>
            {move || revoke.value().get().and_then(Result::err).map(|e| view! { <ErrorNote error=e/> })}
        </section>
    }
}

#[component]
fn KeyRow(
    key: KeyInfo,
    /// The prefix of the key that replaced this one in a rotation.
    replaced_by: Option<String>,
    /// The prefix of the key this one replaced.
    replaces: Option<String>,
    /// A key is being created or rotated: another rotation waits for it.
    busy: Signal<bool>,
    on_rotate: Callback<(KeyInfo, u64)>,
    revoke: ServerAction<RevokeKey>,
    tenant: Memo<String>,
) -> impl IntoView {
    let state = key.state.as_str();
    let usable = matches!(state, "live");
    let (rotating, set_rotating) = signal(false);
    // The old key's grace period, one hour unless changed.
    let (grace, set_grace) = signal("1".to_owned());
    let (grace_unit, set_grace_unit) = signal(3600_u64);
    let grace_problem = move || grace_seconds(&grace.get(), grace_unit.get()).err();
    let grace_id = format!("grace-{}", key.id);
    let on_rotate_submit = {
        let key = key.clone();
        move |ev: SubmitEvent| {
            ev.prevent_default();
            if busy.get_untracked() {
                return;
            }
            if let Ok(seconds) = grace_seconds(&grace.get_untracked(), grace_unit.get_untracked()) {
                set_rotating.set(false);
                on_rotate.run((key.clone(), seconds));
            }
        }
    };
    let revoke_it = Callback::new({
        let id = key.id.clone();
        move |()| {
            revoke.dispatch(RevokeKey {
                tenant: tenant.get_untracked(),
                key: id.clone(),
            });
        }
    });
    let badge = match key.state {
        KeyState::Live => "badge",
        KeyState::Grace => "badge warn",
        KeyState::Expired | KeyState::Revoked => "badge bad",
    };
    view! {
        <tr data-testid="key-row" data-prefix=key.prefix.clone() data-state=state>
            <td>
                {key.name.clone()}
                {replaced_by.map(|p| view! { <br/><span class="muted small" data-testid="replaced-by">"replaced by " <code>{format!("{p}…")}</code></span> })}
                {replaces.map(|p| view! { <br/><span class="muted small" data-testid="replaces">"replaces " <code>{format!("{p}…")}</code></span> })}
            </td>
            <td><code>{format!("{}…", key.prefix)}</code></td>
            <td>{key.kind.as_str()}</td>
            <td>{format_utc(key.created_at)}</td>
            <td>{format_maybe(key.expires_at)}</td>
            <td>{format_maybe(key.last_used_at)}</td>
            <td><span class=badge data-testid="key-state">{state_words(&key)}</span></td>
            <td class="links">
                {move || match (usable, rotating.get()) {
                    (false, _) => None,
                    (true, false) => Some(view! {
                        <button type="button" class="secondary" data-testid="rotate" on:click=move |_| set_rotating.set(true)>"Rotate"</button>
                    }.into_any()),
                    (true, true) => Some(view! {
                        <form class="inline-form" on:submit=on_rotate_submit.clone()>
                            <label for=grace_id.clone()>"Old key works for"</label>
                            <input id=grace_id.clone() class="short" inputmode="numeric" data-testid="grace-amount"
                                aria-invalid=move || grace_problem().is_some().to_string()
                                prop:value=grace on:input=move |ev| set_grace.set(event_target_value(&ev))/>
                            // The select shows the unit the signal holds, also when the form is
                            // opened again after a Cancel.
                            <select aria-label="Grace period unit" data-testid="grace-unit"
                                prop:value=move || grace_unit.get().to_string()
                                on:change=move |ev| set_grace_unit.set(event_target_value(&ev).parse().unwrap_or(3600))>
                                {GRACE_UNITS.into_iter().map(|(name, seconds)| view! {
                                    <option value=seconds.to_string() selected=move || grace_unit.get() == seconds>{name}</option>
                                }).collect_view()}
                            </select>
                            <span class="field-error" role="status">{grace_problem}</span>
                            <button type="submit" data-testid="rotate-confirm" disabled=move || grace_problem().is_some() || busy.get()>"Rotate now"</button>
                            <button type="button" class="secondary" on:click=move |_| set_rotating.set(false)>"Cancel"</button>
                        </form>
                    }.into_any()),
                }}
                <Show when=move || matches!(state, "live" | "grace")>
                    <ConfirmButton label="Revoke".into() question="Revoke it? It stops working at once.".into()
                        on_confirm=revoke_it danger=true testid="revoke"/>
                </Show>
            </td>
        </tr>
    }
    .into_any()
}

/// The address the page was loaded from (only the browser renders a new key).
fn page_origin() -> String {
    #[cfg(feature = "hydrate")]
    {
        if let Some(origin) = web_sys::window().and_then(|w| w.location().origin().ok()) {
            return origin;
        }
    }
    "http://localhost:3000".to_owned()
}

/// Shows a new key once, with a copy button.
#[component]
fn RevealBox(reveal: Reveal, tenant: String, on_dismiss: Callback<()>) -> impl IntoView {
    // None: not tried; Some(true): copied; Some(false): the browser refused.
    let (copied, set_copied) = signal(None::<bool>);
    let key_text = NodeRef::<leptos::html::Code>::new();
    let plaintext = reveal.plaintext.clone();
    let copy = move |_| {
        #[cfg(feature = "hydrate")]
        {
            // What the page does when it cannot copy: select the key, so that the user copies
            // it by hand, and say so.
            let by_hand = move || {
                if let (Some(window), Some(code)) = (web_sys::window(), key_text.get_untracked()) {
                    if let Ok(Some(selection)) = window.get_selection() {
                        let _ = selection.select_all_children(&code);
                    }
                }
                set_copied.set(Some(false));
            };
            let Some(window) = web_sys::window() else {
                by_hand();
                return;
            };
            let navigator = window.navigator();
            // A page served over plain HTTP (an insecure context) has no navigator.clipboard.
            let has_clipboard = js_sys::Reflect::get(&navigator, &"clipboard".into())
                .is_ok_and(|c| !c.is_undefined() && !c.is_null());
            if !has_clipboard {
                by_hand();
                return;
            }
            let promise = navigator.clipboard().write_text(&plaintext);
            wasm_bindgen_futures::spawn_local(async move {
                match wasm_bindgen_futures::JsFuture::from(promise).await {
                    Ok(_) => set_copied.set(Some(true)),
                    Err(_) => by_hand(),
                }
            });
        }
        #[cfg(not(feature = "hydrate"))]
        {
            let _ = (&plaintext, set_copied, key_text);
        }
    };
    // Leaving the page while the key is shown loses it: the browser asks first, until the
    // user says it is stored.
    #[cfg(feature = "hydrate")]
    {
        let asking = window_event_listener(leptos::ev::beforeunload, |ev| {
            ev.prevent_default();
            ev.set_return_value("");
        });
        on_cleanup(move || asking.remove());
    }
    view! {
        <div class="reveal" role="status" data-testid="new-key">
            <p><strong>"Your new " {reveal.what.clone()}</strong>
                " — copy it now. It is not stored anywhere and will not be shown again."</p>
            <p><code class="key" node_ref=key_text data-testid="new-key-value">{reveal.plaintext.clone()}</code></p>
            <p class="actions">
                <button type="button" data-testid="copy-key" on:click=copy>
                    {move || if copied.get() == Some(true) { "Copied" } else { "Copy" }}
                </button>
                <button type="button" class="secondary" on:click=move |_| on_dismiss.run(())>"I have stored it"</button>
            </p>
            <p>{match reveal.kind {
                KeyKind::Check => "Try it: this asks whether a check would be allowed (the key's tenant's rules decide).",
                _ => "Try it: this lists the tenant's rules with the key.",
            }}</p>
            <pre class="example" data-testid="new-key-example"><code>{curl_example(&page_origin(), &tenant, reveal.kind, &reveal.plaintext)}</code></pre>
            {move || (copied.get() == Some(false)).then(|| view! {
                <p class="error" role="alert" data-testid="copy-by-hand">"This browser does not let the page copy here (a page served over plain HTTP has no clipboard access). The key is selected: press Ctrl+C (⌘C on a Mac) to copy it."</p>
            })}
        </div>
    }
}
