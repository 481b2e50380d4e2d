//! Keeps each piece of constant data in its own WASM data segment, so that the split build
//! (`cargo leptos build --split`) can move a page's strings into that page's chunk instead of
//! leaving all of them in the main module, which every page downloads.

fn main() {
    if std::env::var("CARGO_CFG_TARGET_ARCH").is_ok_and(|arch| arch.starts_with("wasm")) {
        println!("cargo:rustc-link-arg-cdylib=--no-merge-data-segments");
    }
}
