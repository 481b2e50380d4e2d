//! The simulate page: a dry-run check against the tenant's current rules and counters.

use leptos::ev::SubmitEvent;
use leptos::prelude::*;

use super::{ResetBucket, ResetInput, SimulateInput, Simulation};
use crate::rules::model::Verdict;
use crate::rules::{check_text, normal_route, RulesForRoute, Scope, MAX_COST};
use crate::tenants::view::TenantTabs;
use crate::ui::{human_ms, use_tenant, ConfirmButton, ErrorNote};

/// A tenant's dry-run page.
#[component]
pub fn SimulatePage() -> impl IntoView {
    let tenant = use_tenant();
    let run = ServerAction::<super::Simulate>::new();
    let route = RwSignal::new(String::new());
    let subject = RwSignal::new(String::new());
    let cost = RwSignal::new("1".to_owned());
    let problems = Memo::new(move |_| {
        let mut problems = Vec::new();
        if let Err(e) = check_text("route", &route.get()) {
            problems.push(e);
        }
        let subject = subject.get();
        if !subject.is_empty() {
            if let Err(e) = check_text("subject", &subject) {
                problems.push(e);
            }
        }
        if !cost
            .get()
            .trim()
            .parse::<u64>()
            .is_ok_and(|c| (1..=MAX_COST).contains(&c))
        {
            problems.push(format!("cost must be a whole number from 1 to {MAX_COST}"));
        }
        problems
    });
    let touched = RwSignal::new(false);
    // Which rules of the typed route count each subject apart, asked when the route is
    // entered: the subject field says whether it is needed.
    let route_rules = ServerAction::<RulesForRoute>::new();
    let ask_rules = move || {
        let typed = route.get_untracked();
        if check_text("route", &typed).is_ok() {
            route_rules.dispatch(RulesForRoute {
                tenant: tenant.get_untracked(),
                route: typed,
            });
        }
    };
    let subject_hint = move || {
        let found = route_rules.value().get().and_then(Result::ok)?;
        if normal_route(&route.get()) != found.route {
            return None;
        }
        let per_subject: Vec<String> = found
            .rules
            .iter()
            .filter(|r| r.body.scope == Scope::Subject)
            .map(|r| r.body.name.clone())
            .collect();
        Some(match per_subject.as_slice() {
            [] if found.rules.is_empty() => {
                format!("Not used: no rule applies to {}.", found.route)
            }
            [] => "Not used: no rule of this route counts each subject apart.".to_owned(),
            [one] => format!("Needed: rule {one} counts each subject apart."),
            many => format!(
                "Needed: rules {} count each subject apart.",
                many.join(", ")
            ),
        })
    };
    // The input of the simulation on screen: a reset runs it again, to show the bucket full.
    let shown = RwSignal::new(None::<SimulateInput>);
    let on_submit = move |ev: SubmitEvent| {
        ev.prevent_default();
        touched.set(true);
        if !problems.get_untracked().is_empty() {
            return;
        }
        let subject = subject.get_untracked();
        let input = SimulateInput {
            route: route.get_untracked(),
            subject: (!subject.is_empty()).then_some(subject),
            cost: cost.get_untracked().trim().parse().ok(),
        };
        shown.set(Some(input.clone()));
        ask_rules();
        run.dispatch(super::Simulate {
            tenant: tenant.get_untracked(),
            input,
        });
    };
    let reset = ServerAction::<ResetBucket>::new();
    // Once a reset is answered, simulate the same check again.
    Effect::new(move |_| {
        if let Some(Ok(_)) = reset.value().get() {
            if let Some(input) = shown.get_untracked() {
                run.dispatch(super::Simulate {
                    tenant: tenant.get_untracked(),
                    input,
                });
            }
        }
    });
    let on_reset = Callback::new(move |(rule_id, subject): (String, Option<String>)| {
        reset.dispatch(ResetBucket {
            tenant: tenant.get_untracked(),
            rule_id,
            input: ResetInput { subject },
        });
    });
    view! {
        <TenantTabs tenant=tenant current="simulate"/>
        <section class="card" aria-labelledby="simulate-title">
            <h2 id="simulate-title">"Simulate a check"</h2>
            <p class="muted">"Decides a check against the current rules and counters without consuming anything."</p>
            <form on:submit=on_submit data-testid="simulate-form">
                <label for="sim-route">"Route"</label>
                <input id="sim-route" required autocomplete="off" placeholder="POST /payments"
                    prop:value=route on:input=move |ev| { touched.set(true); route.set(event_target_value(&ev)) }
                    on:change=move |_| ask_rules()/>
                <label for="sim-subject">"Subject"</label>
                <input id="sim-subject" autocomplete="off" placeholder="user-42" aria-describedby="sim-subject-hint"
                    prop:value=subject on:input=move |ev| subject.set(event_target_value(&ev))/>
                <span class="muted" id="sim-subject-hint" data-testid="subject-hint">{subject_hint}</span>
                <label for="sim-cost">"Cost"</label>
                <input id="sim-cost" inputmode="numeric" prop:value=cost on:input=move |ev| cost.set(event_target_value(&ev))/>
                <button type="submit" data-testid="simulate" disabled=move || run.pending().get()>"Simulate"</button>
            </form>
            {move || (touched.get() && !problems.get().is_empty()).then(|| view! {
                <ul class="field-error">{problems.get().into_iter().map(|p| view! { <li>{p}</li> }).collect_view()}</ul>
            })}
            {move || reset.value().get().map(|r| match r {
                Ok(done) => {
                    let whose = done.subject.map_or_else(|| "the whole tenant".to_owned(), |s| format!("subject {s}"));
                    let said = if done.cleared { "cleared" } else { "already empty" };
                    view! {
                        <p class="ok" role="status" data-testid="reset-done">
                            {format!("Rule {}'s bucket for {whose}: {said}. Its next check starts with the full limit, on every instance.", done.policy)}
                        </p>
                    }.into_any()
                }
                Err(e) => view! { <ErrorNote error=e/> }.into_any(),
            })}
            {move || {
                // A result is shown only while the form still says what was simulated.
                let asked = shown.get()?;
                if run.pending().get() {
                    return Some(view! { <p class="muted">"Simulating…"</p> }.into_any());
                }
                let same = normal_route(&route.get()) == normal_route(&asked.route)
                    && subject.with(|s| (!s.is_empty()).then(|| s.clone())) == asked.subject
                    && cost.with(|c| c.trim().parse().ok()) == asked.cost;
                if !same {
                    return Some(view! {
                        <p class="muted" data-testid="simulation-stale">"The input changed since the last simulation: Simulate again to see how it would be decided."</p>
                    }.into_any());
                }
                run.value().get().map(|r| match r {
                    Ok(sim) => view! { <SimulationResult sim=sim subject=asked.subject.clone() on_reset=on_reset/> }.into_any(),
                    Err(e) => view! { <ErrorNote error=e/> }.into_any(),
                })
            }}
        </section>
    }
}

/// The simulation's answer, a row per rule; each rule's bucket (the simulated `subject`'s, or
/// the tenant's) can be reset from its row, after a confirmation.
#[component]
fn SimulationResult(
    sim: Simulation,
    subject: Option<String>,
    on_reset: Callback<(String, Option<String>)>,
) -> impl IntoView {
    let verdict = if sim.allowed { "allowed" } else { "denied" };
    let headline = match &sim.policy {
        None => "No rule applies to this route: it would be allowed.".to_owned(),
        Some(policy) => format!("It would be {verdict}; the deciding rule is {policy}."),
    };
    view! {
        <div class="result" data-testid="simulation" data-allowed=sim.allowed.to_string()>
            <p class:ok=sim.allowed class:error=!sim.allowed><strong>{headline}</strong></p>
            <Show when={let empty = sim.rules.is_empty(); move || !empty}>
                <table class="grid">
                    <thead><tr>
                        <th scope="col">"Rule"</th><th scope="col">"Verdict"</th><th scope="col">"Remaining after"</th>
                        <th scope="col">"Retry after"</th><th scope="col">"Full again in"</th><th scope="col">"Bucket"</th>
                    </tr></thead>
                    <tbody>
                        {sim.rules.clone().into_iter().map(|r| {
                            let verdict = match r.verdict {
                                Verdict::Allow => "allow",
                                Verdict::Deny => "deny",
                                Verdict::NeverFits => "never fits (cost above capacity)",
                            };
                            let bucket_subject = match r.scope {
                                Scope::Subject => subject.clone(),
                                Scope::Tenant => None,
                            };
                            let whose = match (&r.scope, &bucket_subject) {
                                (Scope::Subject, Some(s)) => format!("subject {s}'s bucket"),
                                _ => "the tenant-wide bucket".to_owned(),
                            };
                            let question = format!("Clear {whose} of rule {}? Its next check starts with the full limit.", r.policy);
                            let reset_it = Callback::new({
                                let rule_id = r.rule_id.clone();
                                move |()| on_reset.run((rule_id.clone(), bucket_subject.clone()))
                            });
                            view! {
                                <tr data-testid="simulated-rule">
                                    <td>{r.policy.clone()}{r.shadow.then_some(" (shadow)")}</td>
                                    <td>{verdict}</td>
                                    <td>{format!("{} of {}", r.remaining.max(0.0).floor(), r.limit)}</td>
                                    <td data-testid="retry-after">{if r.retry_after_ms == 0 { "—".to_owned() } else { human_ms(r.retry_after_ms) }}</td>
                                    <td data-testid="full-again">{human_ms(r.reset_after_ms)}</td>
                                    <td><ConfirmButton label="Reset".into() question=question on_confirm=reset_it danger=true testid="reset-bucket"/></td>
                                </tr>
                            }
                        }).collect_view()}
                    </tbody>
                </table>
            </Show>
        </div>
    }
}
