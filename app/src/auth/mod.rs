//! Sign-in. This is the page's skeleton: the form, its labels and its keyboard behaviour.
//! Accounts and sessions (argon2id, tower-sessions) are not built yet, so the form says so
//! instead of pretending to sign anyone in.

use leptos::prelude::*;

/// The sign-in page.
#[component]
pub fn SignInPage() -> impl IntoView {
    view! {
        <section class="card sign-in" aria-labelledby="sign-in-title">
            <h1 id="sign-in-title">"Sign in"</h1>
            <form method="post" action="#" on:submit=|ev| ev.prevent_default()>
                <label for="email">"Email"</label>
                <input id="email" name="email" type="email" autocomplete="username" required/>
                <label for="password">"Password"</label>
                <input id="password" name="password" type="password" autocomplete="current-password" required/>
                <button type="submit" disabled=true>"Sign in"</button>
            </form>
            <p class="muted" data-testid="sign-in-note">
                "Console accounts are not available in this version yet. "
                "Operators manage Sluice through the API and the command line for now."
            </p>
        </section>
    }
}
