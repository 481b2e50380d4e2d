//! The rules file page: the tenant's rules as YAML (server-rendered, so readable without
//! scripts, and downloadable), edited in place or replaced by a pasted file, previewed as a
//! plan (what is created, updated field by field, deleted, left alone, and every problem),
//! then applied exactly as previewed.

use leptos::prelude::*;

use super::{ImportRules, RulesPlan, MAX_IMPORT_BYTES};
use crate::error::AppError;
use crate::tenants::view::TenantTabs;
use crate::ui::{focus_soon, use_tenant, ErrorNote};

/// `text` as a `data:` URL (percent-encoded: a `data:` URL reads `+` as itself, not a space),
/// so the browser can save it without another request.
fn data_url(text: &str) -> String {
    let mut url = String::from("data:application/yaml;charset=utf-8,");
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-_.~:/".contains(&byte) {
            url.push(char::from(byte));
        } else {
            url.push_str(&format!("%{byte:02X}"));
        }
    }
    url
}

/// A tenant's rules as a file.
#[component]
pub fn RulesFilePage() -> impl IntoView {
    let tenant = use_tenant();
    let preview = ServerAction::<ImportRules>::new();
    let apply = ServerAction::<ImportRules>::new();
    // Asking the server for the file again (after an apply, or to drop the edits).
    let reload = RwSignal::new(0_u32);
    let exported = Resource::new(
        move || (tenant.get(), reload.get()),
        |(t, _)| super::export_rules(t),
    );
    // Once applied, the box shows the rules as they now are; a refused apply keeps the edits.
    Effect::new(move |_| {
        if apply
            .value()
            .with(|v| matches!(v, Some(Ok(plan)) if plan.applied))
        {
            reload.update(|n| *n += 1);
        }
    });
    // Which action's answer is shown: the one dispatched last.
    let applying_last = RwSignal::new(false);
    let shown = move || -> Option<Result<RulesPlan, AppError>> {
        if applying_last.get() {
            apply.value().get()
        } else {
            preview.value().get()
        }
    };
    // The answer takes the focus: the button pressed is disabled while the server answers, which
    // would leave the focus nowhere. A screen reader reads the answer, and Shift+Tab goes back
    // to Apply.
    Effect::new(move |_| {
        if shown().is_some() {
            focus_soon("rules-file-outcome");
        }
    });
    view! {
        <TenantTabs tenant=tenant current="rules"/>
        <section class="card" aria-labelledby="file-title">
            <h2 id="file-title">"Rules as a file"</h2>
            <p class="muted">"Every rule of the tenant, by name, without ids: keep it in Git, review changes as diffs, and apply a file here, with " <code>"sluice rules import"</code> " or " <code>"POST /v1/admin/tenants/{tenant}/rules/import"</code> ". A rule the file leaves out is deleted; a renamed rule is a new rule (new buckets, no overrides)."</p>
            <p><a href=move || format!("/tenants/{}/rules", tenant.get())>"Back to the rules"</a></p>
            <Transition fallback=|| view! { <p class="muted">"Loading the rules…"</p> }>
                {move || exported.get().map(|reading| match reading {
                    Err(e) => view! { <ErrorNote error=e/> }.into_any(),
                    Ok(yaml) => view! {
                        <FileEditor yaml=yaml tenant=tenant preview=preview apply=apply
                            applying_last=applying_last reload=reload/>
                    }.into_any(),
                })}
            </Transition>
            {move || shown().map(|r| match r {
                Ok(plan) => view! { <PlanView plan=plan/> }.into_any(),
                Err(e) => view! { <ErrorNote error=e/> }.into_any(),
            })}
        </section>
    }
}

/// The file's text, with Download, Preview, Apply and Reload. Apply is offered only for the
/// text last previewed, when its plan changes something and has no problems, and sends that
/// plan's fingerprint, so the server applies exactly it or nothing.
#[component]
fn FileEditor(
    yaml: String,
    tenant: Memo<String>,
    preview: ServerAction<ImportRules>,
    apply: ServerAction<ImportRules>,
    applying_last: RwSignal<bool>,
    reload: RwSignal<u32>,
) -> impl IntoView {
    let text = RwSignal::new(yaml.clone());
    let previewed = RwSignal::new(None::<String>);
    let too_long = move || text.with(|t| t.len() > MAX_IMPORT_BYTES);
    let busy = move || preview.pending().get() || apply.pending().get();
    let on_preview = move |_| {
        let body = text.get_untracked();
        previewed.set(Some(body.clone()));
        applying_last.set(false);
        preview.dispatch(ImportRules {
            tenant: tenant.get_untracked(),
            text: body,
            apply: false,
            expect: None,
        });
    };
    let ready = move || {
        preview.value().with(|v| match v {
            Some(Ok(plan)) => (!plan.is_empty() && plan.all_problems().is_empty())
                .then(|| plan.fingerprint.clone()),
            _ => None,
        })
    };
    let current = move || previewed.with(|p| p.as_ref().is_some_and(|p| text.with(|t| p == t)));
    let can_apply = move || !busy() && !applying_last.get() && current() && ready().is_some();
    let on_apply = move |_| {
        if let (Some(expect), Some(body)) = (ready(), previewed.get_untracked()) {
            applying_last.set(true);
            apply.dispatch(ImportRules {
                tenant: tenant.get_untracked(),
                text: body,
                apply: true,
                expect: Some(expect),
            });
        }
    };
    let download = data_url(&yaml);
    view! {
        <label for="rules-file">"The rules (YAML)"</label>
        <textarea id="rules-file" class="config" rows="20" spellcheck="false" data-testid="rules-file"
            aria-describedby="rules-file-help"
            prop:value=move || text.get() on:input=move |ev| text.set(event_target_value(&ev))>{yaml.clone()}</textarea>
        <p id="rules-file-help" class="muted">"Edit the rules here or paste a file (YAML or JSON, at most " {MAX_IMPORT_BYTES / 1024} " KiB), then Preview. Nothing changes until Apply."</p>
        <Show when=too_long>
            <p class="field-error" data-testid="rules-file-too-long">{format!("At most {} KiB is read.", MAX_IMPORT_BYTES / 1024)}</p>
        </Show>
        <p class="actions">
            <a class="button secondary" href=download download=move || format!("rules-{}.yaml", tenant.get())
                data-testid="rules-file-download">"Download"</a>
            <button type="button" data-testid="rules-file-preview"
                disabled=move || busy() || too_long() || text.with(|t| t.trim().is_empty())
                on:click=on_preview>"Preview"</button>
            <button type="button" data-testid="rules-file-apply" disabled=move || !can_apply()
                on:click=on_apply>"Apply"</button>
            <button type="button" class="secondary" data-testid="rules-file-reload" disabled=busy
                on:click=move |_| {
                    preview.value().set(None);
                    apply.value().set(None);
                    reload.update(|n| *n += 1);
                }>"Discard edits"</button>
        </p>
    }
}

/// A plan: the totals, one row per rule it touches (each changed field and problem), the
/// names it leaves alone, and what stops it.
#[component]
fn PlanView(plan: RulesPlan) -> impl IntoView {
    let problems = plan.all_problems();
    let status = if plan.applied {
        view! { <p class="ok" role="status" id="rules-file-outcome" tabindex="-1" data-testid="rules-file-applied">"Applied: " {plan.summary()} "."</p> }.into_any()
    } else if !problems.is_empty() {
        view! { <p class="field-error" role="status" id="rules-file-outcome" tabindex="-1" data-testid="rules-file-refused">{format!("Cannot apply: {} problem(s), listed below. Nothing has changed.", problems.len())}</p> }.into_any()
    } else if plan.is_empty() {
        view! { <p role="status" id="rules-file-outcome" tabindex="-1" data-testid="rules-file-same">"The file matches the tenant's rules: nothing to apply."</p> }.into_any()
    } else {
        view! { <p role="status" id="rules-file-outcome" tabindex="-1" data-testid="rules-file-plan">"Preview: " {plan.summary()} ". Nothing has changed yet."</p> }.into_any()
    };
    let problem_list = |list: Vec<super::FieldError>| {
        view! {
            <ul class="field-error">
                {list.into_iter().map(|p| view! { <li>{p.field} ": " {p.message}</li> }).collect_view()}
            </ul>
        }
    };
    let creates = plan
        .create
        .into_iter()
        .map(|c| {
            let name = c.rule.name.clone();
            view! {
                <tr data-name=name data-change="create">
                    <td>"create"</td><td>{c.rule.name}</td>
                    <td>{super::view::describe_limit(c.rule.algorithm, c.rule.limit, c.rule.period_ms)}</td>
                    <td>{problem_list(c.problems)}</td>
                </tr>
            }
        })
        .collect_view();
    let updates = plan
        .update
        .into_iter()
        .map(|u| {
            let name = u.rule.name.clone();
            view! {
                <tr data-name=name data-change="update">
                    <td>"update"</td><td>{u.rule.name}</td>
                    <td><ul class="changes">
                        {u.changes.into_iter().map(|c| view! {
                            <li><code>{c.field}</code> ": " {c.before} " → " {c.after}</li>
                        }).collect_view()}
                    </ul></td>
                    <td>{problem_list(u.problems)}</td>
                </tr>
            }
        })
        .collect_view();
    let deletes = plan
        .delete
        .into_iter()
        .map(|d| {
            let name = d.name.clone();
            let note = match d.overrides {
                0 => String::new(),
                n => format!("and its {n} override(s)"),
            };
            view! {
                <tr data-name=name data-change="delete">
                    <td>"delete"</td><td>{d.name}</td><td>{note}</td><td></td>
                </tr>
            }
        })
        .collect_view();
    let unchanged = plan.unchanged.join(", ");
    view! {
        <div data-testid="rules-file-result">
            {status}
            {problem_list(plan.problems)}
            <table class="grid" data-testid="rules-file-changes">
                <thead><tr><th scope="col">"Change"</th><th scope="col">"Rule"</th><th scope="col">"What"</th><th scope="col">"Problems"</th></tr></thead>
                <tbody>{creates}{updates}{deletes}</tbody>
            </table>
            <p class="muted" data-testid="rules-file-unchanged">"Unchanged: " {if unchanged.is_empty() { "none".to_owned() } else { unchanged }}</p>
        </div>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_data_url_keeps_the_text_and_escapes_what_a_url_cannot_hold() {
        let url = data_url("rules:\n- name: a b\n  limit: 10 # é");
        assert_eq!(
            url,
            "data:application/yaml;charset=utf-8,rules:%0A-%20name:%20a%20b%0A%20%20limit:%2010%20%23%20%C3%A9"
        );
    }
}
