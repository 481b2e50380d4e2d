//! The rules page: the list with its shadow and fail-mode toggles, the form that validates
//! as you type (with the same [`RuleBody::problems`] the server runs), and the behaviour
//! preview.

use leptos::ev::SubmitEvent;
use leptos::prelude::*;

use super::preview::{self, Shape, Traffic};
use super::{
    normal_route, Algorithm, DeleteOverride, DeleteRule, DescriptorEntry, FailureMode, FieldError,
    ImportEnvoy, ImportPreview, MatchKind, OverrideBody, RuleBody, RuleInfo, RulesForRoute,
    SaveRule, Scope, SetOverride, MAX_IMPORT_BYTES, MAX_PERIOD_MS,
};
use crate::error::AppError;
use crate::tenants::view::TenantTabs;
use crate::ui::{focus_soon, human_ms, use_tenant, ConfirmButton, ErrorNote};

/// Period units offered by the form, with their length in ms.
const UNITS: [(&str, u64); 5] = [
    ("ms", 1),
    ("seconds", 1000),
    ("minutes", 60_000),
    ("hours", 3_600_000),
    ("days", 86_400_000),
];

/// The largest unit that divides `period_ms` exactly.
fn largest_unit(period_ms: u64) -> (&'static str, u64) {
    UNITS
        .iter()
        .rev()
        .find(|(_, size)| period_ms.is_multiple_of(*size))
        .copied()
        .unwrap_or(UNITS[0])
}

/// A period in its largest whole unit, short: `1 s`, `10 min`, `250 ms`.
fn short_period(period_ms: u64) -> String {
    let (unit, size) = largest_unit(period_ms);
    let short = match unit {
        "seconds" => "s",
        "minutes" => "min",
        "hours" => "h",
        "days" => "d",
        other => other,
    };
    format!("{} {short}", period_ms / size)
}

/// `10 / 1 s` style text for a limit and period.
pub fn describe_rate(limit: u64, period_ms: u64) -> String {
    format!("{limit} / {}", short_period(period_ms))
}

/// A rule's limit in words: `10 / 1 s`, or for `concurrency`, `20 in flight, leases up to
/// 30 s`.
pub fn describe_limit(algorithm: Algorithm, limit: u64, period_ms: u64) -> String {
    if algorithm == Algorithm::Concurrency {
        format!(
            "{limit} in flight, leases up to {}",
            short_period(period_ms)
        )
    } else {
        describe_rate(limit, period_ms)
    }
}

/// What the form holds: a rule, valid when `problems` is empty.
#[derive(Debug, Clone, PartialEq)]
struct Draft {
    body: RuleBody,
    problems: Vec<FieldError>,
}

impl Draft {
    fn valid(&self) -> Option<RuleBody> {
        self.problems.is_empty().then(|| self.body.clone())
    }

    /// The problem shown next to `field`.
    fn problem(&self, field: &str) -> Option<String> {
        self.problems
            .iter()
            .find(|p| p.field == field)
            .map(|p| p.message.clone())
    }
}

/// The form's fields, as typed.
#[derive(Debug, Clone, Copy, Default)]
struct RuleForm {
    /// The fields changed since the form was (re)set: a field's problem shows once it is
    /// touched, or once the form was submitted.
    touched: RwSignal<Vec<&'static str>>,
    submitted: RwSignal<bool>,
    editing: RwSignal<Option<String>>,
    name: RwSignal<String>,
    match_kind: RwSignal<String>,
    route: RwSignal<String>,
    /// A descriptor rule's entries: `key` or `key=value`, separated by commas.
    descriptor: RwSignal<String>,
    scope: RwSignal<String>,
    algorithm: RwSignal<String>,
    limit: RwSignal<String>,
    period: RwSignal<String>,
    unit: RwSignal<u64>,
    burst: RwSignal<String>,
    penalty: RwSignal<bool>,
    failure_mode: RwSignal<String>,
    shadow: RwSignal<bool>,
    enabled: RwSignal<bool>,
    allow_override: RwSignal<bool>,
}

/// A whole number typed in `field`, or what is wrong with it in words: empty, negative, a
/// fraction or text, or too big for any rule.
fn whole(field: &str, text: &str) -> Result<u64, FieldError> {
    let text = text.trim();
    let problem = |message: String| FieldError::new(field, message);
    if text.is_empty() {
        return Err(problem("enter a whole number".into()));
    }
    if let Some(rest) = text.strip_prefix('-') {
        if !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit()) {
            return Err(problem("must be at least 1".into()));
        }
    }
    if !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(problem("must be a whole number".into()));
    }
    // Only digits: a number too big for u64 is read as the largest, so that the rule's own
    // range check says what is wrong in the field's terms (a period in the unit picked).
    Ok(text.parse::<u64>().unwrap_or(u64::MAX))
}

/// A problem as the form says it: periods in the unit the user picked, not in milliseconds.
fn in_form_units(problem: FieldError, unit_ms: u64) -> FieldError {
    let unit = UNITS
        .iter()
        .find(|(_, ms)| *ms == unit_ms)
        .map_or("ms", |(name, _)| name);
    let message = match problem.field.as_str() {
        "period_ms" if problem.message.starts_with("must be between") => {
            let most = MAX_PERIOD_MS / unit_ms;
            format!("must be from 1 ms to 366 days: at most {most} {unit}")
        }
        "period_ms" | "burst" if problem.message.starts_with("refilling") => {
            "refilling the whole bucket from empty must take at most 366 days: lower the burst or the period, or raise the limit".into()
        }
        _ => return problem,
    };
    FieldError::new(&problem.field, message)
}

impl RuleForm {
    /// A form holding the defaults of a new rule (set by [`RuleForm::reset`] alone).
    fn new() -> Self {
        let form = Self::default();
        form.reset();
        form
    }

    fn reset(&self) {
        self.touched.set(Vec::new());
        self.submitted.set(false);
        self.editing.set(None);
        self.name.set(String::new());
        self.match_kind.set("exact".into());
        self.route.set(String::new());
        self.descriptor.set(String::new());
        self.scope.set("tenant".into());
        self.algorithm.set("token_bucket".into());
        self.limit.set("10".into());
        self.period.set("1".into());
        self.unit.set(1000);
        self.burst.set(String::new());
        self.penalty.set(false);
        self.failure_mode.set("closed".into());
        self.shadow.set(false);
        self.enabled.set(true);
        self.allow_override.set(false);
    }

    fn load(&self, rule: &RuleInfo) {
        let b = &rule.body;
        self.editing.set(Some(rule.id.clone()));
        self.name.set(b.name.clone());
        self.match_kind.set(b.match_kind.as_str().into());
        self.route.set(b.route.clone().unwrap_or_default());
        self.descriptor.set(
            b.descriptor
                .as_deref()
                .map(show_entries)
                .unwrap_or_default(),
        );
        self.scope.set(b.scope.as_str().into());
        self.algorithm.set(b.algorithm.as_str().into());
        self.limit.set(b.limit.to_string());
        let (_, size) = largest_unit(b.period_ms);
        self.period.set((b.period_ms / size).to_string());
        self.unit.set(size);
        self.burst
            .set(b.burst.map(|x| x.to_string()).unwrap_or_default());
        self.penalty.set(b.penalty);
        self.failure_mode.set(b.failure_mode.as_str().into());
        self.shadow.set(b.shadow);
        self.enabled.set(b.enabled);
        self.allow_override.set(b.allow_override);
    }

    /// The rule the fields describe and every problem with it (tracked: re-run as you type).
    fn draft(&self) -> Draft {
        let mut problems = Vec::new();
        let match_kind = MatchKind::parse(&self.match_kind.get()).unwrap_or(MatchKind::Exact);
        let scope = Scope::parse(&self.scope.get()).unwrap_or(Scope::Tenant);
        let algorithm = self
            .algorithm
            .get()
            .parse::<Algorithm>()
            .unwrap_or(Algorithm::TokenBucket);
        let failure_mode = FailureMode::parse(&self.failure_mode.get()).unwrap_or_default();
        let limit = whole("limit", &self.limit.get()).unwrap_or_else(|e| {
            problems.push(e);
            1
        });
        let period_ms = whole("period_ms", &self.period.get())
            .map(|p| p.saturating_mul(self.unit.get()))
            .unwrap_or_else(|e| {
                problems.push(e);
                1000
            });
        let burst_text = self.burst.get();
        let burst = if burst_text.trim().is_empty() {
            None
        } else {
            match whole("burst", &burst_text) {
                Ok(b) => Some(b),
                Err(e) => {
                    problems.push(e);
                    None
                }
            }
        };
        // Saved in its normal form (`POST /payments`), the form a check's route is matched in.
        let route = normal_route(&self.route.get()).into_owned();
        // Only descriptor rules read the (otherwise disabled) descriptor field.
        let descriptor =
            (match_kind == MatchKind::Descriptor).then(|| parse_entries(&self.descriptor.get()));
        let body = RuleBody {
            name: self.name.get().trim().to_owned(),
            match_kind,
            // Rules that match no route ignore the (disabled) route field.
            route: match_kind.needs_route().then_some(route),
            descriptor,
            scope,
            algorithm,
            limit,
            period_ms,
            burst,
            // A concurrency rule's (disabled) penalty box is not read.
            penalty: self.penalty.get() && algorithm != Algorithm::Concurrency,
            failure_mode,
            shadow: self.shadow.get(),
            enabled: self.enabled.get(),
            // Only descriptor rules offer (and read) the switch.
            allow_override: match_kind == MatchKind::Descriptor && self.allow_override.get(),
        };
        let unit = self.unit.get();
        for p in body.problems() {
            if !problems.iter().any(|q| q.field == p.field) {
                problems.push(in_form_units(p, unit));
            }
        }
        Draft { body, problems }
    }

    /// Whether `field`'s problem is shown: once the field was touched or the form submitted.
    fn shows(&self, field: &str) -> bool {
        self.submitted.get() || self.touched.with(|t| t.contains(&field))
    }

    fn touch(&self, field: &'static str) {
        if !self.touched.with_untracked(|t| t.contains(&field)) {
            self.touched.update(|t| t.push(field));
        }
    }
}

/// A rate as people write it: 20, 0.6, 0.05, 1,333.3 is 1333.3.
fn short_number(x: f64) -> String {
    let text = if x >= 100.0 || x.fract() == 0.0 {
        format!("{x:.0}")
    } else if x >= 1.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.3}")
    };
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        text
    }
}

/// The id of the control that holds `field` (a problem's field), to move the focus there.
fn field_id(field: &str) -> &'static str {
    match field {
        "name" => "rule-name",
        "route" => "rule-route",
        "descriptor" => "rule-descriptor",
        "scope" => "rule-scope",
        "algorithm" => "rule-algorithm",
        "limit" => "rule-limit",
        "period_ms" => "rule-period",
        "burst" => "rule-burst",
        "allow_override" => "rule-override",
        _ => "rule-name",
    }
}

/// Whether two rules apply to the same checks: the same kind of match on the same route (or
/// descriptor entries).
fn same_match(a: &RuleBody, b: &RuleBody) -> bool {
    let route = |r: &RuleBody| r.route.as_deref().map(|r| normal_route(r).into_owned());
    a.match_kind == b.match_kind
        && (!a.match_kind.needs_route() || route(a) == route(b))
        && a.descriptor == b.descriptor
}

/// "Which rules apply to …": a route resolved by the decision core, as a check of it would be.
#[component]
fn WhichRules(tenant: Memo<String>) -> impl IntoView {
    let route = RwSignal::new(String::new());
    let ask = ServerAction::<RulesForRoute>::new();
    let on_submit = move |ev: SubmitEvent| {
        ev.prevent_default();
        ask.dispatch(RulesForRoute {
            tenant: tenant.get_untracked(),
            route: route.get_untracked(),
        });
    };
    view! {
        <form class="inline-form" on:submit=on_submit data-testid="which-form">
            <label for="which-route">"Which rules apply to"</label>
            <input id="which-route" autocomplete="off" placeholder="POST /payments/42"
                prop:value=route on:input=move |ev| route.set(event_target_value(&ev))/>
            <button type="submit" class="secondary" data-testid="which-rules"
                disabled=move || ask.pending().get() || route.with(|r| r.trim().is_empty())>"Show"</button>
        </form>
        <p class="muted">"A check counts against its route's exact rules, else its longest matching prefix rules, else the default rules; and always the tenant-wide (all) rules. Disabled rules count for nothing."</p>
        {move || ask.value().get().map(|r| match r {
            Ok(found) if found.rules.is_empty() => view! {
                <p role="status" data-testid="which-result">"No rule applies to " <code>{found.route}</code> ": its checks are all allowed."</p>
            }.into_any(),
            Ok(found) => view! {
                <div role="status" data-testid="which-result">
                    <p>"A check of " <code>{found.route}</code> " is counted by:"</p>
                    <ul>
                        {found.rules.into_iter().map(|r| {
                            let name = r.body.name.clone();
                            let how = match &r.body.route {
                                Some(route) => format!("{} {route}", r.body.match_kind.as_str()),
                                None => r.body.match_kind.as_str().to_owned(),
                            };
                            view! { <li data-name=name>{r.body.name}" ("{how}")"</li> }
                        }).collect_view()}
                    </ul>
                </div>
            }.into_any(),
            Err(e) => view! { <ErrorNote error=e/> }.into_any(),
        })}
    }
}

/// Descriptor entries as the form shows them: `key` or `key=value`, separated by commas.
fn show_entries(entries: &[DescriptorEntry]) -> String {
    entries
        .iter()
        .map(DescriptorEntry::show)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The form's descriptor text as entries (validation says what is wrong with them).
fn parse_entries(text: &str) -> Vec<DescriptorEntry> {
    text.split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(|e| match e.split_once('=') {
            Some((key, value)) => DescriptorEntry {
                key: key.trim().to_owned(),
                value: Some(value.trim().to_owned()),
            },
            None => DescriptorEntry {
                key: e.to_owned(),
                value: None,
            },
        })
        .collect()
}

/// A tenant's rules.
#[component]
pub fn RulesPage() -> impl IntoView {
    let tenant = use_tenant();
    let save = ServerAction::<SaveRule>::new();
    // The list's own switches: saving one must not reset a form being filled in.
    let toggle = ServerAction::<SaveRule>::new();
    let delete = ServerAction::<DeleteRule>::new();
    let import = ServerAction::<ImportEnvoy>::new();
    let rules = Resource::new(
        move || {
            (
                tenant.get(),
                save.version().get(),
                toggle.version().get(),
                delete.version().get(),
                import.version().get(),
            )
        },
        |(t, ..)| super::list_rules(t),
    );
    let form = RuleForm::new();
    // The per-subject rule whose overrides are open below the list.
    let chosen = RwSignal::new(None::<RuleInfo>);
    // The list's last change, to say it was saved and to undo it.
    let last = RwSignal::new(None::<LastChange>);
    // Undo restores the rule as it was before that change: once the rules change any other
    // way (the form, a delete, an import), that is no longer the change to undo.
    Effect::new(move |_| {
        save.version().track();
        delete.version().track();
        import.version().track();
        last.set(None);
    });
    // The deleted rule's row is gone: the focus goes to the list's heading, not the page's top.
    Effect::new(move |_| {
        if let Some(Ok(_)) = delete.value().get() {
            focus_soon("rules-title");
        }
    });

    view! {
        <TenantTabs tenant=tenant current="rules"/>
        <section class="card" aria-labelledby="rules-title">
            <h2 id="rules-title" tabindex="-1">"Rules"</h2>
            <p class="muted">
                <a href="#rule-name" data-testid="new-rule-link" on:click=move |ev| {
                    ev.prevent_default();
                    focus_soon("rule-name");
                }>"Create a rule"</a>
                " below, or keep the rules in a file: " <a data-testid="rules-file-link" href=move || format!("/tenants/{}/rules/file", tenant.get())>"export, edit and import them"</a> ", with a preview of every change."</p>
            <Transition fallback=|| view! { <p class="muted">"Loading rules…"</p> }>
                {move || rules.get().map(|reading| match reading {
                    Err(e) => view! { <ErrorNote error=e/> }.into_any(),
                    Ok(list) if list.is_empty() => view! {
                        <p class="muted" data-testid="no-rules">"No rules yet: every check is allowed. Create one below."</p>
                    }.into_any(),
                    Ok(list) => view! {
                        <table class="grid" data-testid="rules-table">
                            <thead><tr>
                                <th scope="col">"Name"</th><th scope="col">"Applies to"</th><th scope="col">"Limit"</th>
                                <th scope="col">"State"</th><th scope="col">"If the limiter is down"</th><th scope="col">"Actions"</th>
                            </tr></thead>
                            <tbody>
                                {list.into_iter().map(|rule| view! {
                                    <RuleRow rule=rule tenant=tenant save=toggle delete=delete form=form chosen=chosen last=last/>
                                }).collect_view()}
                            </tbody>
                        </table>
                    }.into_any(),
                })}
            </Transition>
            {move || delete.value().get().and_then(Result::err).map(|e| view! { <ErrorNote error=e/> })}
            {move || toggle.value().get().and_then(Result::err).map(|e| view! { <ErrorNote error=e/> })}
            {move || {
                let saved = matches!(toggle.value().get(), Some(Ok(_))) && !toggle.pending().get();
                last.get().filter(|_| saved).map(|change| {
                    let undo = change.clone();
                    let undone = change.undone;
                    view! {
                        <p class="ok" role="status" data-testid="change-saved">
                            {if undone {
                                format!("Undone: rule {} is back as it was.", change.name)
                            } else {
                                format!("Saved: rule {} {}.", change.name, change.said)
                            }}
                            " "
                            <Show when=move || !undone>
                                <button type="button" class="secondary" data-testid="undo-change" on:click={
                                    let undo = undo.clone();
                                    move |_| {
                                        last.set(Some(LastChange { undone: true, ..undo.clone() }));
                                        toggle.dispatch(SaveRule {
                                            tenant: tenant.get_untracked(),
                                            id: Some(undo.id.clone()),
                                            body: undo.before.clone(),
                                        });
                                    }
                                }>"Undo"</button>
                            </Show>
                        </p>
                    }
                })
            }}
            {view! { <WhichRules tenant=tenant/> }.into_any()}
        </section>
        {move || chosen.get().map(|rule| view! { <Overrides tenant=tenant rule=rule chosen=chosen/> })}
        // Type-erased: the page's view type is otherwise too deep for the compiler's limit.
        {view! { <RuleEditor tenant=tenant save=save form=form rules=rules/> }.into_any()}
        {view! { <EnvoyImport tenant=tenant import=import/> }.into_any()}
    }
}

/// Importing an envoyproxy/ratelimit configuration: paste it, see what it would change, then
/// apply exactly what was previewed.
#[component]
fn EnvoyImport(tenant: Memo<String>, import: ServerAction<ImportEnvoy>) -> impl IntoView {
    let yaml = RwSignal::new(String::new());
    // What the shown preview is of (tenant and text): Apply is offered only while both are
    // unchanged, and sends the preview's fingerprint, so the server applies that plan or none.
    let previewed = RwSignal::new(None::<(String, String)>);
    let too_long = move || yaml.with(|y| y.len() > MAX_IMPORT_BYTES);
    let shown = move || match import.value().get() {
        Some(Ok(p)) if !p.applied => Some(p.fingerprint),
        _ => None,
    };
    let preview = move |_| {
        let (tenant, text) = (tenant.get_untracked(), yaml.get_untracked());
        previewed.set(Some((tenant.clone(), text.clone())));
        import.dispatch(ImportEnvoy {
            tenant,
            yaml: text,
            apply: false,
            expect: None,
        });
    };
    let current = move || {
        previewed.with(|p| {
            p.as_ref()
                .is_some_and(|(t, y)| *t == tenant.get() && *y == yaml.get())
        })
    };
    let can_apply = move || !import.pending().get() && shown().is_some() && current();
    let apply = move |_| {
        let expect = import.value().with_untracked(|v| match v {
            Some(Ok(p)) if !p.applied => Some(p.fingerprint.clone()),
            _ => None,
        });
        if let (Some(expect), Some((tenant, text))) = (expect, previewed.get_untracked()) {
            import.dispatch(ImportEnvoy {
                tenant,
                yaml: text,
                apply: true,
                expect: Some(expect),
            });
        }
    };
    view! {
        <section class="card" aria-labelledby="import-title">
            <h2 id="import-title">"Import from envoyproxy/ratelimit"</h2>
            <p class="muted">"Paste a configuration of Envoy's rate limit service: each descriptor with a limit becomes a descriptor rule (for the gRPC API). Preview first; Apply makes the previewed changes in one step. Route rules are never touched."</p>
            <label for="import-yaml">"Configuration (YAML)"</label>
            <textarea id="import-yaml" class="config" rows="14" spellcheck="false" prop:value=yaml
                on:input=move |ev| yaml.set(event_target_value(&ev))></textarea>
            <Show when=too_long>
                <p class="field-error" data-testid="import-too-long">{format!("At most {} KiB is read.", MAX_IMPORT_BYTES / 1024)}</p>
            </Show>
            <p class="actions">
                <button type="button" data-testid="import-preview"
                    disabled=move || import.pending().get() || too_long() || yaml.with(|y| y.trim().is_empty())
                    on:click=preview>"Preview"</button>
                <button type="button" data-testid="import-apply" disabled=move || !can_apply()
                    on:click=apply>"Apply"</button>
            </p>
            {move || import.value().get().map(|r| match r {
                Ok(preview) => view! { <ImportResult preview=preview/> }.into_any(),
                Err(e) => view! { <ErrorNote error=e/> }.into_any(),
            })}
        </section>
    }
}

/// What an import would do, or did.
#[component]
fn ImportResult(preview: ImportPreview) -> impl IntoView {
    let summary = format!(
        "{} to create, {} to update, {} to delete, {} unchanged",
        preview.create.len(),
        preview.update.len(),
        preview.delete.len(),
        preview.unchanged
    );
    let rows = |verb: &'static str, rules: Vec<RuleBody>| {
        rules
            .into_iter()
            .map(move |r| {
                let entries = show_entries(r.descriptor.as_deref().unwrap_or_default());
                let rate = describe_limit(r.algorithm, r.limit, r.period_ms);
                let name = r.name.clone();
                view! {
                    <tr data-name=name>
                        <td>{verb}</td><td>{r.name}</td><td>{entries}</td>
                        <td>{rate}{if r.shadow { " (shadow)" } else { "" }}</td>
                    </tr>
                }
            })
            .collect_view()
    };
    let deletes = preview
        .delete
        .into_iter()
        .map(|name| {
            let shown = name.clone();
            view! { <tr data-name=name><td>"delete"</td><td>{shown}</td><td></td><td></td></tr> }
        })
        .collect_view();
    view! {
        <div data-testid="import-result">
            {if preview.applied {
                view! { <p class="ok" role="status" data-testid="import-applied">"Applied: " {summary}"."</p> }.into_any()
            } else {
                view! { <p role="status" data-testid="import-plan">"Preview: " {summary}". Nothing has changed yet."</p> }.into_any()
            }}
            <p class="muted">"Envoy must send this tenant's name or id as the domain (the file says " <code>{preview.domain}</code> ")."</p>
            <table class="grid" data-testid="import-changes">
                <thead><tr><th scope="col">"Change"</th><th scope="col">"Rule"</th><th scope="col">"Descriptor"</th><th scope="col">"Limit"</th></tr></thead>
                <tbody>
                    {rows("create", preview.create)}
                    {rows("update", preview.update)}
                    {deletes}
                </tbody>
            </table>
            <Show when={let empty = preview.notes.is_empty(); move || !empty}>
                <h3>"Not imported"</h3>
            </Show>
            <ul data-testid="import-notes">
                {preview.notes.into_iter().map(|n| view! { <li>{n}</li> }).collect_view()}
            </ul>
        </div>
    }
}

#[component]
fn RuleRow(
    rule: RuleInfo,
    tenant: Memo<String>,
    save: ServerAction<SaveRule>,
    delete: ServerAction<DeleteRule>,
    form: RuleForm,
    chosen: RwSignal<Option<RuleInfo>>,
    last: RwSignal<Option<LastChange>>,
) -> impl IntoView {
    let b = rule.body.clone();
    let overrides = (b.scope == Scope::Subject).then(|| {
        let rule = rule.clone();
        view! {
            <button type="button" class="secondary" data-testid="open-overrides"
                on:click=move |_| chosen.set(Some(rule.clone()))>"Overrides"</button>
        }
    });
    let applies = match (&b.route, &b.descriptor, b.match_kind) {
        (Some(route), _, kind) => format!("{} {route}", kind.as_str()),
        (None, Some(entries), kind) => format!("{} {}", kind.as_str(), show_entries(entries)),
        (None, None, kind) => kind.as_str().to_owned(),
    };
    let scope = if b.scope == Scope::Subject {
        " per subject"
    } else {
        " for the tenant"
    };
    let burst = b
        .burst
        .filter(|_| b.algorithm.has_burst())
        .map(|x| format!(", burst {x}"))
        .unwrap_or_default();
    // Every change from the list is confirmed first, said when saved, and can be undone once.
    let save_with = {
        let rule = rule.clone();
        move |said: String, change: &dyn Fn(&mut RuleBody)| {
            let mut body = rule.body.clone();
            change(&mut body);
            last.set(Some(LastChange {
                id: rule.id.clone(),
                name: rule.body.name.clone(),
                before: rule.body.clone(),
                said,
                undone: false,
            }));
            save.dispatch(SaveRule {
                tenant: tenant.get_untracked(),
                id: Some(rule.id.clone()),
                body,
            });
        }
    };
    let toggle_shadow = Callback::new({
        let save_with = save_with.clone();
        let to_shadow = !b.shadow;
        move |()| {
            let said = if to_shadow {
                "is now shadow: counted, never denied"
            } else {
                "is now enforced"
            };
            save_with(said.to_owned(), &|b: &mut RuleBody| b.shadow = to_shadow);
        }
    });
    // A failure mode picked in the select, waiting for its confirmation, which takes the
    // focus (Escape there cancels it).
    let picked = RwSignal::new(None::<FailureMode>);
    let mode_yes = NodeRef::<leptos::html::Button>::new();
    #[cfg(feature = "hydrate")]
    Effect::new(move |_| {
        if picked.get().is_some() {
            if let Some(button) = mode_yes.get() {
                let _ = button.focus();
            }
        }
    });
    let current_mode = b.failure_mode;
    let confirm_mode = Callback::new(move |()| {
        if let Some(mode) = picked.get_untracked() {
            picked.set(None);
            save_with(
                format!("now {} when the limiter is down", failure_words(mode)),
                &|b: &mut RuleBody| b.failure_mode = mode,
            );
        }
    });
    let delete_it = Callback::new({
        let id = rule.id.clone();
        move |()| {
            delete.dispatch(DeleteRule {
                tenant: tenant.get_untracked(),
                id: id.clone(),
            });
        }
    });
    // The form takes the focus (and comes into view); Escape there gives it back here.
    let edit = {
        let rule = rule.clone();
        move |_| {
            form.load(&rule);
            focus_soon("rule-name");
        }
    };
    let name = b.name.clone();
    let (state, state_class) = match (b.enabled, b.shadow) {
        (false, _) => ("disabled", "badge muted"),
        (true, true) => ("shadow", "badge warn"),
        (true, false) => ("enforced", "badge"),
    };
    let shadow_switch = b.enabled.then(|| {
        let (label, question) = if b.shadow {
            (
                "Enforce",
                format!("Enforce rule {name}? Checks over its limit will be denied (429)."),
            )
        } else {
            (
                "Make shadow",
                format!("Make rule {name} a shadow rule? Its checks are counted as would-deny but never denied."),
            )
        };
        view! { <ConfirmButton label=label.into() question=question on_confirm=toggle_shadow testid="toggle-shadow"/> }
    });
    let mode_id = format!("failure-{}", rule.id);
    // No change after all: the question goes, and the focus goes back to the select.
    let cancel_mode = Callback::new({
        let mode_id = mode_id.clone();
        move |()| {
            picked.set(None);
            focus_soon(mode_id.clone());
        }
    });
    view! {
        <tr data-testid="rule-row" data-name=name.clone()>
            <td><strong>{name.clone()}</strong></td>
            <td><code>{applies}</code>{scope}</td>
            <td>{describe_limit(b.algorithm, b.limit, b.period_ms)}{burst}<br/><span class="muted small">{b.algorithm.title()}</span></td>
            <td>
                <span class=state_class data-testid="rule-state">{state}</span>
                " "
                {shadow_switch}
            </td>
            <td>
                <label class="visually-hidden" for=mode_id.clone()>{format!("If the limiter is down, rule {name}")}</label>
                <select id=mode_id data-testid="failure-mode"
                    title="What a check answers when the limiter cannot decide"
                    prop:value=move || picked.get().unwrap_or(current_mode).as_str()
                    on:change=move |ev| {
                        let mode = FailureMode::parse(&event_target_value(&ev)).unwrap_or(current_mode);
                        picked.set((mode != current_mode).then_some(mode));
                    }>
                    // `selected` too: the server-rendered page (read before any script) shows
                    // the rule's own mode.
                    {[FailureMode::Closed, FailureMode::Open, FailureMode::Local].into_iter().map(|m| view! {
                        <option value=m.as_str() selected=m == current_mode>{failure_words(m)}</option>
                    }).collect_view()}
                </select>
                {move || picked.get().map(|mode| view! {
                    <span class="confirm" role="group" data-testid="failure-question"
                        on:keydown=move |ev: leptos::ev::KeyboardEvent| if ev.key() == "Escape" { cancel_mode.run(()) }>
                        <span class="question">{format!(
                            "When the limiter is down, {} instead of {}?",
                            failure_words(mode), failure_words(current_mode)
                        )}</span>
                        <button type="button" data-testid="failure-confirm" node_ref=mode_yes on:click=move |_| confirm_mode.run(())>"Yes, change"</button>
                        <button type="button" class="secondary" on:click=move |_| cancel_mode.run(())>"Cancel"</button>
                    </span>
                })}
            </td>
            <td class="links">
                <button type="button" class="secondary" id=format!("edit-{}", rule.id) data-testid="edit-rule" on:click=edit>"Edit"</button>
                {overrides}
                <ConfirmButton label="Delete".into() question=format!("Delete rule {name}?") on_confirm=delete_it danger=true testid="delete-rule"/>
            </td>
        </tr>
    }
}

/// A change made from the rules list: what it said, and the rule as it was, for Undo.
#[derive(Debug, Clone)]
struct LastChange {
    id: String,
    name: String,
    before: RuleBody,
    said: String,
    /// Whether this is the undoing of the change.
    undone: bool,
}

/// What a failure mode does, in words.
fn failure_words(mode: FailureMode) -> &'static str {
    match mode {
        FailureMode::Closed => "fail closed: answer 503",
        FailureMode::Open => "fail open: allow",
        FailureMode::Local => "limit locally",
    }
}

/// A per-subject rule's overrides: the list (each deleted after a confirmation) and a form
/// that sets one, validated with the same [`OverrideBody::problems`] the server runs.
#[component]
fn Overrides(
    tenant: Memo<String>,
    rule: RuleInfo,
    chosen: RwSignal<Option<RuleInfo>>,
) -> impl IntoView {
    let set = ServerAction::<SetOverride>::new();
    let delete = ServerAction::<DeleteOverride>::new();
    let rule_id = rule.id.clone();
    let listed = Resource::new(
        move || (tenant.get(), set.version().get(), delete.version().get()),
        move |(t, ..)| super::list_overrides(t, rule_id.clone()),
    );
    let subject = RwSignal::new(String::new());
    let limit = RwSignal::new(String::new());
    let per_seconds = RwSignal::new(String::new());
    let burst = RwSignal::new(String::new());
    let touched = RwSignal::new(false);
    let body = rule.body.clone();
    // The override as typed, or what is wrong with it.
    let draft = Memo::new(move |_| -> Result<OverrideBody, Vec<FieldError>> {
        let number = |field: &str, text: String| -> Result<Option<u64>, FieldError> {
            let text = text.trim().to_owned();
            if text.is_empty() {
                return Ok(None);
            }
            whole(field, &text).map(Some)
        };
        let mut problems = Vec::new();
        let mut read = |field: &str, text: String| {
            number(field, text).unwrap_or_else(|e| {
                problems.push(e);
                None
            })
        };
        let limit = read("limit", limit.get());
        let period_ms = read("period_ms", per_seconds.get()).map(|s| s.saturating_mul(1000));
        let burst = read("burst", burst.get());
        let o = OverrideBody {
            subject: subject.get().trim().to_owned(),
            limit: limit.unwrap_or(0),
            period_ms,
            burst,
        };
        problems.extend(o.problems(&body));
        if problems.is_empty() {
            Ok(o)
        } else {
            Err(problems)
        }
    });
    let on_submit = {
        let rule_id = rule.id.clone();
        move |ev: SubmitEvent| {
            ev.prevent_default();
            touched.set(true);
            if let Ok(body) = draft.get_untracked() {
                set.dispatch(SetOverride {
                    tenant: tenant.get_untracked(),
                    rule: rule_id.clone(),
                    body,
                });
            }
        }
    };
    Effect::new(move |_| {
        if let Some(Ok(_)) = set.value().get() {
            touched.set(false);
            subject.set(String::new());
            limit.set(String::new());
            per_seconds.set(String::new());
            burst.set(String::new());
        }
    });
    let name = rule.body.name.clone();
    let period_ms = rule.body.period_ms;
    let rule_id = rule.id.clone();
    view! {
        <section class="card" aria-labelledby="overrides-title" data-testid="overrides">
            <h2 id="overrides-title">{format!("Overrides of {name}")}</h2>
            <p class="muted">{format!(
                "Another limit for one subject (acme-42) or every subject with a prefix (acme-*). An exact subject beats the longest prefix, which beats the rule ({}). Applied on every instance within a second.",
                describe_limit(rule.body.algorithm, rule.body.limit, period_ms)
            )}</p>
            <Transition fallback=|| view! { <p class="muted">"Loading overrides…"</p> }>
                {move || listed.get().map(|reading| match reading {
                    Err(e) => view! { <ErrorNote error=e/> }.into_any(),
                    Ok(list) if list.is_empty() => view! { <p class="muted" data-testid="no-overrides">"No overrides: every subject gets the rule's limit."</p> }.into_any(),
                    Ok(list) => view! {
                        <table class="grid">
                            <thead><tr><th scope="col">"Subject"</th><th scope="col">"Limit"</th><th scope="col">"Actions"</th></tr></thead>
                            <tbody>
                                {list.into_iter().map(|o| {
                                    let rate = describe_rate(o.body.limit, o.body.period_ms.unwrap_or(period_ms));
                                    let burst = o.body.burst.map(|b| format!(", burst {b}")).unwrap_or_default();
                                    let remove = Callback::new({
                                        let (rule, id) = (rule_id.clone(), o.id.clone());
                                        move |()| {
                                            delete.dispatch(DeleteOverride {
                                                tenant: tenant.get_untracked(),
                                                rule: rule.clone(),
                                                id: id.clone(),
                                            });
                                        }
                                    });
                                    view! {
                                        <tr data-testid="override-row" data-subject=o.body.subject.clone()>
                                            <td><code>{o.body.subject.clone()}</code></td>
                                            <td>{rate}{burst}</td>
                                            <td><ConfirmButton label="Delete".into() question=format!("Delete the override of {}?", o.body.subject) on_confirm=remove danger=true testid="delete-override"/></td>
                                        </tr>
                                    }
                                }).collect_view()}
                            </tbody>
                        </table>
                    }.into_any(),
                })}
            </Transition>
            <form on:submit=on_submit data-testid="override-form">
                <label for="override-subject">"Subject or prefix*"</label>
                <input id="override-subject" autocomplete="off" placeholder="acme-*"
                    prop:value=subject on:input=move |ev| subject.set(event_target_value(&ev))/>
                <label for="override-limit">"Override limit"</label>
                <input id="override-limit" inputmode="numeric"
                    prop:value=limit on:input=move |ev| limit.set(event_target_value(&ev))/>
                <label for="override-per">"Per (seconds; empty: the rule's period)"</label>
                <input id="override-per" inputmode="numeric"
                    prop:value=per_seconds on:input=move |ev| per_seconds.set(event_target_value(&ev))/>
                <label for="override-burst">"Override burst (optional)"</label>
                <input id="override-burst" inputmode="numeric"
                    prop:value=burst on:input=move |ev| burst.set(event_target_value(&ev))/>
                <button type="submit" data-testid="save-override" disabled=move || set.pending().get()>"Set override"</button>
                <button type="button" class="secondary" on:click=move |_| chosen.set(None)>"Close"</button>
            </form>
            {move || (touched.get()).then(|| draft.get().err()).flatten().map(|problems| view! {
                <ul class="field-error" data-testid="override-problems">
                    {problems.into_iter().map(|p| view! { <li>{format!("{}: {}", p.field, p.message)}</li> }).collect_view()}
                </ul>
            })}
            {move || set.value().get().map(|r| match r {
                Ok(o) => view! { <p class="ok" role="status" data-testid="override-saved">{format!("Saved: {} now gets {}.", o.body.subject, describe_rate(o.body.limit, o.body.period_ms.unwrap_or(period_ms)))}</p> }.into_any(),
                Err(e) => view! { <ErrorNote error=e/> }.into_any(),
            })}
            {move || delete.value().get().and_then(Result::err).map(|e| view! { <ErrorNote error=e/> })}
        </section>
    }
}

/// The rule form: create, or edit the rule chosen in the list.
#[component]
fn RuleEditor(
    tenant: Memo<String>,
    save: ServerAction<SaveRule>,
    form: RuleForm,
    rules: Resource<Result<Vec<RuleInfo>, AppError>>,
) -> impl IntoView {
    let parsed = Memo::new(move |_| form.draft());
    // Other rules on the same match as the form's rule: saving asks first, since a check
    // there is counted by each of them.
    let twins = move || -> Vec<String> {
        let body = parsed.with(|d| d.body.clone());
        let editing = form.editing.get();
        rules
            .get()
            .and_then(Result::ok)
            .unwrap_or_default()
            .into_iter()
            .filter(|r| Some(&r.id) != editing.as_ref())
            .filter(|r| same_match(&r.body, &body))
            .map(|r| r.body.name)
            .collect()
    };
    // The rules on the same match, while the user is asked whether to save next to them.
    let asking = RwSignal::new(None::<Vec<String>>);
    // A question about another match, or another rule, is no longer the question.
    let matched = Memo::new(move |_| {
        parsed.with(|d| {
            (
                d.body.match_kind,
                d.body.route.clone(),
                d.body.descriptor.clone(),
            )
        })
    });
    Effect::new(move |_| {
        matched.track();
        form.editing.track();
        asking.set(None);
    });
    let problem = move |field: &'static str| {
        move || {
            if form.shows(field) {
                parsed.with(|d| d.problem(field))
            } else {
                None
            }
        }
    };
    // Marked invalid for assistive technology exactly when its problem is shown.
    let invalid = move |field: &'static str| move || problem(field)().is_some().to_string();
    // Whether any problem is shown: saving waits until they are fixed.
    let showing_problems =
        move || parsed.with(|d| d.problems.iter().any(|p| form.shows(p.field.as_str())));
    // A saved rule: the form is new again and the focus goes to what was said about it.
    Effect::new(move |_| {
        if let Some(Ok(_)) = save.value().get() {
            form.reset();
            focus_soon("rule-saved");
        }
    });
    // Leaving an edit (Cancel, or Escape in the form) gives the focus back to its Edit button.
    let cancel_edit = move || {
        if let Some(id) = form.editing.get_untracked() {
            form.reset();
            focus_soon(format!("edit-{id}"));
        }
    };
    let dispatch = move || {
        if let Some(body) = parsed.get_untracked().valid() {
            asking.set(None);
            save.dispatch(SaveRule {
                tenant: tenant.get_untracked(),
                id: form.editing.get_untracked(),
                body,
            });
        }
    };
    let on_submit = move |ev: SubmitEvent| {
        ev.prevent_default();
        form.submitted.set(true);
        if let Some(first) = parsed.with_untracked(|d| d.problems.first().map(|p| p.field.clone()))
        {
            // Every problem shows now; the focus goes to the first field that has one.
            focus_soon(field_id(&first));
            return;
        }
        let twins = untrack(twins);
        if twins.is_empty() {
            dispatch();
        } else {
            asking.set(Some(twins));
        }
    };
    let what = move || {
        parsed.with(|d| match (&d.body.route, d.body.match_kind) {
            (Some(route), _) => route.clone(),
            (None, MatchKind::Default) => "every route no other rule matches".to_owned(),
            (None, MatchKind::All) => "every check".to_owned(),
            (None, _) => "these descriptor entries".to_owned(),
        })
    };
    // What the typed route is saved as, when that differs from what was typed.
    let normal = move || {
        let typed = form.route.get();
        let needs = MatchKind::parse(&form.match_kind.get()).is_some_and(MatchKind::needs_route);
        let normal = normal_route(&typed).into_owned();
        (needs && !normal.is_empty() && normal != typed).then_some(normal)
    };
    let text = move |field: &'static str, signal: RwSignal<String>| {
        move |ev: leptos::ev::Event| {
            form.touch(field);
            signal.set(event_target_value(&ev));
        }
    };
    // A concurrency rule's limit is requests in flight, and its period a lease's lifetime.
    let in_flight = move || form.algorithm.get() == Algorithm::Concurrency.as_str();
    let has_burst = move || {
        form.algorithm
            .get()
            .parse::<Algorithm>()
            .is_ok_and(Algorithm::has_burst)
    };

    view! {
        <section class="card" aria-labelledby="rule-form-title">
            <h2 id="rule-form-title">
                {move || if form.editing.get().is_some() { "Edit rule" } else { "Create a rule" }}
            </h2>
            <form class="wide" on:submit=on_submit data-testid="rule-form"
                on:keydown=move |ev: leptos::ev::KeyboardEvent| if ev.key() == "Escape" {
                    // First the question about a second rule on the same match, then the edit.
                    if asking.get_untracked().is_some() { asking.set(None) } else { cancel_edit() }
                }>
                <div class="fields">
                    <label for="rule-name">"Name"</label>
                    <input id="rule-name" autocomplete="off" placeholder="payments-per-user"
                        aria-describedby="rule-name-problem" aria-invalid=invalid("name")
                        prop:value=form.name on:input=text("name", form.name)/>
                    <span class="field-error" id="rule-name-problem" data-testid="problem-name">{problem("name")}</span>

                    <label for="rule-match">"Applies to"</label>
                    <select id="rule-match" prop:value=form.match_kind on:change=text("match", form.match_kind)>
                        <option value="exact">"exactly this route"</option>
                        <option value="prefix">"routes starting with"</option>
                        <option value="default">"routes no other rule matches"</option>
                        <option value="all">"every check (tenant-wide)"</option>
                        <option value="descriptor">"an Envoy descriptor (gRPC)"</option>
                    </select>
                    <span></span>

                    <label for="rule-route">"Route"</label>
                    <input id="rule-route" autocomplete="off" placeholder="POST /payments"
                        aria-describedby="rule-route-normal rule-route-problem" aria-invalid=invalid("route")
                        prop:disabled=move || !MatchKind::parse(&form.match_kind.get()).is_some_and(MatchKind::needs_route)
                        prop:value=form.route on:input=text("route", form.route)/>
                    <span>
                        <span class="field-error" id="rule-route-problem" data-testid="problem-route">{problem("route")}</span>
                        <span class="muted" id="rule-route-normal" data-testid="route-normal">
                            {move || normal().map(|n| view! { "Saved as " <code>{n}</code> ": checks match routes in this form." })}
                        </span>
                    </span>

                    <label for="rule-descriptor">"Descriptor"</label>
                    <input id="rule-descriptor" autocomplete="off" placeholder="service=api, remote_address"
                        aria-describedby="rule-descriptor-problem" aria-invalid=invalid("descriptor")
                        prop:disabled=move || form.match_kind.get() != MatchKind::Descriptor.as_str()
                        prop:value=form.descriptor on:input=text("descriptor", form.descriptor)/>
                    <span class="field-error" id="rule-descriptor-problem" data-testid="problem-descriptor">{problem("descriptor")}</span>

                    <label for="rule-scope">"Counted"</label>
                    <select id="rule-scope" aria-describedby="rule-scope-problem" aria-invalid=invalid("scope")
                        prop:value=form.scope on:change=text("scope", form.scope)>
                        <option value="tenant">"for the whole tenant"</option>
                        <option value="subject">"per subject (user, IP, …)"</option>
                    </select>
                    <span class="field-error" id="rule-scope-problem" data-testid="problem-scope">{problem("scope")}</span>

                    <label for="rule-algorithm">"Algorithm"</label>
                    <select id="rule-algorithm" aria-describedby="rule-algorithm-about rule-algorithm-problem"
                        prop:value=form.algorithm on:change=text("algorithm", form.algorithm)>
                        {Algorithm::ALL.into_iter().map(|a| view! { <option value=a.as_str()>{a.title()}</option> }).collect_view()}
                    </select>
                    <span>
                        <span class="field-error" id="rule-algorithm-problem">{problem("algorithm")}</span>
                        <span class="muted small" id="rule-algorithm-about" data-testid="algorithm-about">
                            {move || form.algorithm.get().parse::<Algorithm>().ok().map(Algorithm::about)}
                            " (" <a href="/docs/ALGORITHMS.md" target="_blank" rel="noopener">"how each algorithm decides"</a> ")"
                        </span>
                    </span>

                    <label for="rule-limit">{move || if in_flight() { "In flight at once" } else { "Limit" }}</label>
                    <input id="rule-limit" inputmode="numeric" aria-describedby="rule-limit-problem" aria-invalid=invalid("limit")
                        prop:value=form.limit on:input=text("limit", form.limit)/>
                    <span class="field-error" id="rule-limit-problem" data-testid="problem-limit">{problem("limit")}</span>

                    <label for="rule-period">{move || if in_flight() { "Leases end after" } else { "Per" }}</label>
                    <span class="inline">
                        <input id="rule-period" inputmode="numeric" aria-describedby="rule-period-problem" aria-invalid=invalid("period_ms")
                            prop:value=form.period on:input=text("period_ms", form.period)/>
                        <label class="visually-hidden" for="rule-unit">"Period unit"</label>
                        <select id="rule-unit" aria-describedby="rule-period-problem" prop:value=move || form.unit.get().to_string()
                            on:change=move |ev| {
                                form.touch("period_ms");
                                form.unit.set(event_target_value(&ev).parse().unwrap_or(1000));
                            }>
                            {UNITS.into_iter().map(|(name, ms)| view! { <option value=ms.to_string()>{name}</option> }).collect_view()}
                        </select>
                    </span>
                    <span class="field-error" id="rule-period-problem" data-testid="problem-period">{problem("period_ms")}</span>

                    <label for="rule-burst">"Burst"</label>
                    <input id="rule-burst" inputmode="numeric" placeholder="same as the limit"
                        aria-describedby="rule-burst-problem" aria-invalid=invalid("burst")
                        prop:disabled=move || !has_burst() prop:value=form.burst on:input=text("burst", form.burst)/>
                    <span class="field-error" id="rule-burst-problem" data-testid="problem-burst">{problem("burst")}</span>

                    <label for="rule-failure">"If the limiter is down"</label>
                    <select id="rule-failure" prop:value=form.failure_mode on:change=text("failure_mode", form.failure_mode)>
                        <option value="closed">"fail closed: answer 503"</option>
                        <option value="open">"fail open: allow"</option>
                        <option value="local">"limit locally: each instance keeps its share"</option>
                    </select>
                    <span></span>
                </div>
                <div class="checks">
                    <label><input type="checkbox" id="rule-shadow" prop:checked=form.shadow
                        on:change=move |ev| form.shadow.set(event_target_checked(&ev))/>
                        " Shadow: evaluate and report, never deny"</label>
                    <label><input type="checkbox" id="rule-penalty" prop:checked=form.penalty
                        prop:disabled=in_flight
                        on:change=move |ev| form.penalty.set(event_target_checked(&ev))/>
                        " Penalty: denied requests still count"</label>
                    <label><input type="checkbox" id="rule-enabled" prop:checked=form.enabled
                        on:change=move |ev| form.enabled.set(event_target_checked(&ev))/>
                        " Enabled"</label>
                    <label><input type="checkbox" id="rule-override" prop:checked=form.allow_override
                        aria-describedby="rule-override-problem"
                        prop:disabled=move || form.match_kind.get() != MatchKind::Descriptor.as_str()
                        on:change=move |ev| {
                            form.touch("allow_override");
                            form.allow_override.set(event_target_checked(&ev));
                        }/>
                        " Envoy may send this descriptor's limit (override)"</label>
                </div>
                <span class="field-error" id="rule-override-problem">{problem("allow_override")}</span>
                {move || asking.get().map(|names| view! {
                    <p class="confirm" role="alert" data-testid="twin-warning">
                        {format!(
                            "{} already {} to {}: a check there is counted by each rule. Save this one too?",
                            names.iter().map(|n| format!("Rule {n:?}")).collect::<Vec<_>>().join(", "),
                            if names.len() == 1 { "applies" } else { "apply" },
                            what(),
                        )}
                        " "
                        <button type="button" data-testid="save-twin" on:click=move |_| dispatch()>"Save it too"</button>
                        <button type="button" class="secondary" on:click=move |_| asking.set(None)>"Cancel"</button>
                    </p>
                })}
                <p class="actions">
                    <button type="submit" data-testid="save-rule"
                        disabled=move || save.pending().get() || showing_problems()>
                        {move || if form.editing.get().is_some() { "Save changes" } else { "Create rule" }}
                    </button>
                    <Show when=move || form.editing.get().is_some()>
                        <button type="button" class="secondary" on:click=move |_| cancel_edit()>"Cancel"</button>
                    </Show>
                </p>
            </form>
            {move || save.value().get().map(|r| match r {
                Ok(rule) => view! { <p class="ok" role="status" id="rule-saved" tabindex="-1" data-testid="rule-saved">"Saved rule " {rule.body.name} "."</p> }.into_any(),
                Err(e) => view! { <ErrorNote error=e/> }.into_any(),
            })}
            <Preview parsed=parsed/>
        </section>
    }
}

/// The behaviour preview of the rule in the form.
#[component]
fn Preview(parsed: Memo<Draft>) -> impl IntoView {
    let (shape, set_shape) = signal(Shape::Steady);
    let (rate_text, set_rate_text) = signal(String::new());
    // The chart is drawn only once the page is live: it is computed in the browser.
    let (live, set_live) = signal(false);
    Effect::new(move |_| set_live.set(true));

    let result = Memo::new(move |_| -> Result<(preview::Series, f64), String> {
        // Only the limit's own fields matter here; a missing name or route does not.
        let draft = parsed.get();
        let limit_fields = ["limit", "period_ms", "burst", "algorithm"];
        if let Some(p) = draft
            .problems
            .iter()
            .find(|p| limit_fields.contains(&p.field.as_str()))
        {
            return Err(format!(
                "fix the {} to see the preview",
                p.field.trim_end_matches("_ms")
            ));
        }
        let spec = draft.body.spec();
        let text = rate_text.get();
        let rate = if text.trim().is_empty() {
            None
        } else {
            Some(
                text.trim()
                    .parse::<f64>()
                    .map_err(|_| "the offered rate must be a number".to_owned())?,
            )
        };
        let traffic = Traffic::for_rule(&spec, shape.get(), rate);
        preview::run(&spec, &traffic).map(|series| (series, traffic.rate))
    });
    // Rates are offered in the rule's own unit of time.
    let unit = Memo::new(move |_| parsed.with(|d| preview::TimeUnit::for_period(d.body.period_ms)));

    view! {
        <div class="preview" data-testid="preview">
            <h3>"Behaviour preview"</h3>
            <div class="inline">
                <label for="preview-shape">"Traffic"</label>
                <select id="preview-shape" on:change=move |ev| set_shape.set(Shape::parse(&event_target_value(&ev)).unwrap_or(Shape::Steady))>
                    {Shape::ALL.into_iter().map(|s| view! { <option value=s.as_str()>{s.as_str()}</option> }).collect_view()}
                </select>
                <label for="preview-rate">{move || format!("Offered requests per {}", unit.get().name)}</label>
                <input id="preview-rate" inputmode="decimal" placeholder="twice the limit"
                    prop:value=rate_text on:input=move |ev| set_rate_text.set(event_target_value(&ev))/>
            </div>
            {move || match result.get() {
                Err(message) => view! { <p class="muted" data-testid="preview-summary">{message}</p> }.into_any(),
                Ok((series, rate)) => {
                    let offered = series.total_offered();
                    let admitted = series.total_admitted();
                    let share = if offered == 0 { 0.0 } else { 100.0 * admitted as f64 / offered as f64 };
                    let unit = series.unit.name;
                    // The offered rate of each point on the chart, for tests and for reading.
                    let drawn = series.rates(&series.offered).iter()
                        .map(|(_, r)| format!("{r:.3}")).collect::<Vec<_>>().join(" ");
                    view! {
                        <p data-testid="preview-summary" data-offered-rates=drawn>
                            {format!("{} traffic at {} requests per {unit} for {}: {admitted} of {offered} admitted ({share:.1}%).",
                                shape.get_untracked().as_str(), short_number(rate), human_ms(series.duration_ms))}
                        </p>
                        <Chart series=series live=live/>
                    }.into_any()
                }
            }}
        </div>
    }
}

#[component]
fn Chart(series: preview::Series, live: ReadSignal<bool>) -> impl IntoView {
    move || {
        if !live.get() {
            return view! { <p class="muted chart-placeholder">"The chart is drawn in your browser once the page is live."</p> }.into_any();
        }
        #[cfg(feature = "hydrate")]
        {
            let label = format!(
                "Offered and admitted requests per {} over time",
                series.unit.name
            );
            match preview::render_svg(&series) {
                Ok(svg) => {
                    view! { <div class="chart" data-testid="preview-chart" role="img" tabindex="0"
                    aria-label=label inner_html=svg></div> }
                    .into_any()
                }
                Err(e) => view! { <p class="error">{e}</p> }.into_any(),
            }
        }
        #[cfg(not(feature = "hydrate"))]
        {
            let _ = &series;
            view! { <p class="muted">"The chart is drawn in the browser."</p> }.into_any()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{describe_rate, in_form_units, short_number, whole, FieldError, MAX_PERIOD_MS};

    #[test]
    fn numbers_that_are_not_whole_say_what_is_wrong() {
        let said = |text: &str| whole("limit", text).unwrap_err().message;
        assert_eq!(said(""), "enter a whole number");
        assert_eq!(said("-3"), "must be at least 1");
        assert_eq!(said("3x"), "must be a whole number");
        assert_eq!(said("2.5"), "must be a whole number");
        // Only too big, not "not a whole number": the range check of the field says more.
        assert_eq!(whole("limit", "99999999999999999999").unwrap(), u64::MAX);
        assert_eq!(whole("limit", " 42 ").unwrap(), 42);
    }

    #[test]
    fn periods_are_refused_in_the_unit_the_user_picked() {
        let too_long = FieldError::new(
            "period_ms",
            format!("must be between 1 ms and {MAX_PERIOD_MS} ms (366 days)"),
        );
        assert_eq!(
            in_form_units(too_long.clone(), 3_600_000).message,
            "must be from 1 ms to 366 days: at most 8784 hours"
        );
        assert!(in_form_units(too_long, 86_400_000)
            .message
            .ends_with("at most 366 days"));
        // A period typed too big for any number (read as the largest) is refused the same way.
        let period = whole("period_ms", "99999999999999999999").unwrap();
        let spec = crate::rules::LimitSpec::new(
            crate::rules::Algorithm::FixedWindow,
            10,
            period.saturating_mul(3_600_000),
        );
        let said = spec
            .problems()
            .into_iter()
            .find(|p| p.field == "period_ms")
            .unwrap();
        assert_eq!(
            in_form_units(said, 3_600_000).message,
            "must be from 1 ms to 366 days: at most 8784 hours"
        );
        let other = FieldError::new("limit", "must be at least 1");
        assert_eq!(in_form_units(other.clone(), 1000), other);
        assert_eq!(short_number(20.0), "20");
        assert_eq!(short_number(0.6), "0.6");
        assert_eq!(short_number(2.5), "2.5");
        assert_eq!(short_number(1333.3), "1333");
    }

    #[test]
    fn rates_use_the_largest_whole_unit() {
        assert_eq!(describe_rate(10, 1000), "10 / 1 s");
        assert_eq!(describe_rate(5, 90_000), "5 / 90 s");
        assert_eq!(describe_rate(100, 3_600_000), "100 / 1 h");
        assert_eq!(describe_rate(3, 1500), "3 / 1500 ms");
    }
}
