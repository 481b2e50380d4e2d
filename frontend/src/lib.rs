//! The browser entry point: hydrates the server-rendered console. Everything else lives in
//! the `app` crate.

/// Called by the script that `HydrationScripts` puts in every page.
#[wasm_bindgen::prelude::wasm_bindgen]
pub fn hydrate() {
    console_error_panic_hook::set_once();
    leptos::mount::hydrate_body(app::App);
}
