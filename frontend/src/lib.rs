//! The browser entry point: hydrates the server-rendered console. Everything else lives in
//! the `app` crate.

/// Called by the script that `HydrationScripts` puts in every page. `hydrate_lazy` first
/// fetches the WASM chunks of the page's lazy route (see `app::root`), then hydrates.
#[wasm_bindgen::prelude::wasm_bindgen]
pub fn hydrate() {
    console_error_panic_hook::set_once();
    leptos::mount::hydrate_lazy(app::App);
}
