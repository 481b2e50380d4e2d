//! The API key an HTTP request presents: `X-API-Key`, or `Authorization: Bearer`.

use axum::http::HeaderMap;

/// The raw key of a request, if it sent one.
pub fn presented_key(headers: &HeaderMap) -> Option<&str> {
    if let Some(key) = headers.get("x-api-key").and_then(|v| v.to_str().ok()) {
        return Some(key.trim());
    }
    let auth = headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, token) = auth.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_come_from_either_header() {
        let mut headers = HeaderMap::new();
        assert_eq!(presented_key(&headers), None);
        headers.insert("authorization", "Bearer sl_chk_abc".parse().unwrap());
        assert_eq!(presented_key(&headers), Some("sl_chk_abc"));
        headers.insert("x-api-key", "sl_chk_def".parse().unwrap());
        assert_eq!(presented_key(&headers), Some("sl_chk_def"));
        let mut basic = HeaderMap::new();
        basic.insert("authorization", "Basic xyz".parse().unwrap());
        assert_eq!(presented_key(&basic), None);
    }
}
