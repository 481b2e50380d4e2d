//! The simulate page: a dry-run check against the tenant's current rules and counters.

use leptos::ev::SubmitEvent;
use leptos::prelude::*;

use super::{SimulateInput, Simulation};
use crate::rules::model::Verdict;
use crate::rules::{check_text, MAX_COST};
use crate::tenants::view::TenantTabs;
use crate::ui::{use_tenant, ErrorNote};

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
    let on_submit = move |ev: SubmitEvent| {
        ev.prevent_default();
        touched.set(true);
        if !problems.get_untracked().is_empty() {
            return;
        }
        let subject = subject.get_untracked();
        run.dispatch(super::Simulate {
            tenant: tenant.get_untracked(),
            input: SimulateInput {
                route: route.get_untracked(),
                subject: (!subject.is_empty()).then_some(subject),
                cost: cost.get_untracked().trim().parse().ok(),
            },
        });
    };
    view! {
        <TenantTabs tenant=tenant current="simulate"/>
        <section class="card" aria-labelledby="simulate-title">
            <h2 id="simulate-title">"Simulate a check"</h2>
            <p class="muted">"Decides a check against the current rules and counters without consuming anything."</p>
            <form on:submit=on_submit data-testid="simulate-form">
                <label for="sim-route">"Route"</label>
                <input id="sim-route" required autocomplete="off" placeholder="POST /payments"
                    prop:value=route on:input=move |ev| { touched.set(true); route.set(event_target_value(&ev)) }/>
                <label for="sim-subject">"Subject (optional)"</label>
                <input id="sim-subject" autocomplete="off" placeholder="user-42"
                    prop:value=subject on:input=move |ev| subject.set(event_target_value(&ev))/>
                <label for="sim-cost">"Cost"</label>
                <input id="sim-cost" inputmode="numeric" prop:value=cost on:input=move |ev| cost.set(event_target_value(&ev))/>
                <button type="submit" data-testid="simulate" disabled=move || run.pending().get()>"Simulate"</button>
            </form>
            {move || (touched.get() && !problems.get().is_empty()).then(|| view! {
                <ul class="field-error">{problems.get().into_iter().map(|p| view! { <li>{p}</li> }).collect_view()}</ul>
            })}
            {move || run.value().get().map(|r| match r {
                Ok(sim) => view! { <SimulationResult sim=sim/> }.into_any(),
                Err(e) => view! { <ErrorNote error=e/> }.into_any(),
            })}
        </section>
    }
}

#[component]
fn SimulationResult(sim: Simulation) -> impl IntoView {
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
                        <th scope="col">"Retry after"</th><th scope="col">"Full again in"</th>
                    </tr></thead>
                    <tbody>
                        {sim.rules.clone().into_iter().map(|r| {
                            let verdict = match r.verdict {
                                Verdict::Allow => "allow",
                                Verdict::Deny => "deny",
                                Verdict::NeverFits => "never fits (cost above capacity)",
                            };
                            view! {
                                <tr data-testid="simulated-rule">
                                    <td>{r.policy.clone()}{r.shadow.then_some(" (shadow)")}</td>
                                    <td>{verdict}</td>
                                    <td>{format!("{} of {}", r.remaining.max(0.0).floor(), r.limit)}</td>
                                    <td>{format!("{} ms", r.retry_after_ms)}</td>
                                    <td>{format!("{} ms", r.reset_after_ms)}</td>
                                </tr>
                            }
                        }).collect_view()}
                    </tbody>
                </table>
            </Show>
        </div>
    }
}
