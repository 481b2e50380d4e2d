//! The one parser of a check's input. `/v1/check` (a JSON body), the admin API's and the
//! console's simulate (a [`SimulateInput`]) and sign-in's own limit all end in a
//! [`CheckInput`], built only from validated newtypes, so each rule about what a route, a
//! subject, a cost or a request id may be is written once, here.

use std::borrow::Cow;

use app::rules::{check_text, normal_route, MAX_COST};
use app::simulate::SimulateInput;
use serde::Deserialize;

use crate::limiter::{
    keys, DEFAULT_RESERVATION_TTL_MS, MAX_RESERVATION_TTL_MS, MIN_RESERVATION_TTL_MS,
};

/// The longest `request_id`.
pub const MAX_REQUEST_ID_BYTES: usize = 128;

/// Input that cannot be a check: which field, and what to send instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct InputError {
    /// The field at fault (`body` when the body itself is unreadable).
    pub field: &'static str,
    pub message: String,
}

fn invalid(field: &'static str, message: impl Into<String>) -> InputError {
    InputError {
        field,
        message: message.into(),
    }
}

/// A route name such as `POST /transfers/{id}` in its normal form
/// ([`app::rules::normal_route`], the form rules are saved and compiled in: `post  /x?y=1 ` is
/// `POST /x`): 1 to 256 bytes, no control characters.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Route(String);

impl Route {
    pub fn parse(s: &str) -> Result<Self, InputError> {
        check_text("route", s).map_err(|m| invalid("route", m))?;
        let normal = normal_route(s);
        if normal.is_empty() {
            return Err(invalid("route", "route must not be blank"));
        }
        Ok(Self(normal.into_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Who a subject-scoped rule counts separately (a user id, an IP, ...): 1 to 256 bytes, no
/// control characters.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Subject(String);

impl Subject {
    pub fn parse(s: &str) -> Result<Self, InputError> {
        check_text("subject", s).map_err(|m| invalid("subject", m))?;
        Ok(Self(s.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// What a check consumes: a whole number from 1 to [`MAX_COST`]; 1 when not given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cost(u64);

impl Cost {
    pub const ONE: Cost = Cost(1);

    pub fn parse(n: u64) -> Result<Self, InputError> {
        if (1..=MAX_COST).contains(&n) {
            Ok(Self(n))
        } else {
            Err(invalid(
                "cost",
                format!("`cost` must be a whole number from 1 to {MAX_COST}, not {n}"),
            ))
        }
    }

    /// A JSON number, which may be negative, fractional or huge.
    fn from_json(n: &serde_json::Number) -> Result<Self, InputError> {
        match n.as_u64() {
            Some(c) => Self::parse(c),
            None => Err(invalid(
                "cost",
                format!("`cost` must be a whole number from 1 to {MAX_COST}, not {n}"),
            )),
        }
    }

    pub fn get(self) -> u64 {
        self.0
    }
}

/// Makes a check idempotent: 1 to [`MAX_REQUEST_ID_BYTES`] bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RequestId(String);

impl RequestId {
    pub fn parse(s: &str) -> Result<Self, InputError> {
        if s.is_empty() || s.len() > MAX_REQUEST_ID_BYTES {
            return Err(invalid(
                "request_id",
                format!("`request_id` must be 1 to {MAX_REQUEST_ID_BYTES} bytes"),
            ));
        }
        Ok(Self(s.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A validated check: what every transport hands to the decision core.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckInput {
    pub route: Route,
    pub cost: Cost,
    pub subject: Option<Subject>,
    pub request_id: Option<RequestId>,
}

/// The JSON body of `/v1/check`, field by field, before validation.
/// Strings are borrowed from the body where they hold no escapes.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CheckBody<'a> {
    #[serde(borrow)]
    route: Option<Text<'a>>,
    cost: Option<serde_json::Number>,
    #[serde(borrow)]
    subject: Option<Text<'a>>,
    #[serde(borrow)]
    request_id: Option<Text<'a>>,
    /// `/v1/reserve` only.
    ttl_ms: Option<serde_json::Number>,
}

/// A string field of the body: serde borrows a `Cow` only where it is the field's whole type,
/// not inside an `Option`, hence this wrapper.
#[derive(Debug, Deserialize)]
#[serde(transparent)]
struct Text<'a>(#[serde(borrow)] Cow<'a, str>);

impl std::ops::Deref for Text<'_> {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl CheckInput {
    /// Parses the JSON body of a check.
    pub fn parse_json(bytes: &[u8]) -> Result<Self, InputError> {
        let (input, ttl) = Self::parse_body(bytes)?;
        if ttl.is_some() {
            return Err(invalid(
                "ttl_ms",
                "`ttl_ms` belongs to POST /v1/reserve; a check keeps nothing to settle",
            ));
        }
        Ok(input)
    }

    /// Parses the JSON body of `/v1/reserve`: a check's fields and `ttl_ms`, how long the
    /// reservation waits to be settled ([`DEFAULT_RESERVATION_TTL_MS`] when not given).
    pub fn parse_reserve_json(bytes: &[u8]) -> Result<(Self, u64), InputError> {
        let (input, ttl) = Self::parse_body(bytes)?;
        let ttl_ms = match ttl {
            None => DEFAULT_RESERVATION_TTL_MS,
            Some(n) => n
                .as_u64()
                .filter(|t| (MIN_RESERVATION_TTL_MS..=MAX_RESERVATION_TTL_MS).contains(t))
                .ok_or_else(|| {
                    invalid(
                        "ttl_ms",
                        format!(
                            "`ttl_ms` must be a whole number of ms from {MIN_RESERVATION_TTL_MS} to {MAX_RESERVATION_TTL_MS} (an hour), not {n}"
                        ),
                    )
                })?,
        };
        Ok((input, ttl_ms))
    }

    fn parse_body(bytes: &[u8]) -> Result<(Self, Option<serde_json::Number>), InputError> {
        let body: CheckBody<'_> = serde_json::from_slice(bytes)
            .map_err(|e| invalid("body", format!("invalid JSON body: {e}")))?;
        let route = body.route.ok_or_else(|| {
            invalid(
                "route",
                "`route` is required, e.g. \"POST /transfers/{id}\"",
            )
        })?;
        let input = Self {
            route: Route::parse(&route)?,
            cost: body.cost.as_ref().map_or(Ok(Cost::ONE), Cost::from_json)?,
            subject: body.subject.as_deref().map(Subject::parse).transpose()?,
            request_id: body
                .request_id
                .as_deref()
                .map(RequestId::parse)
                .transpose()?,
        };
        Ok((input, body.ttl_ms))
    }

    /// A simulation's input: the fields of a check, without a request id.
    pub fn from_simulation(input: &SimulateInput) -> Result<Self, InputError> {
        Ok(Self {
            route: Route::parse(&input.route)?,
            cost: input.cost.map_or(Ok(Cost::ONE), Cost::parse)?,
            subject: input.subject.as_deref().map(Subject::parse).transpose()?,
            request_id: None,
        })
    }

    /// A check of cost 1 on `route` for `subject`, built by the server itself.
    pub fn new(route: &str, subject: Option<&str>) -> Result<Self, InputError> {
        Ok(Self {
            route: Route::parse(route)?,
            cost: Cost::ONE,
            subject: subject.map(Subject::parse).transpose()?,
            request_id: None,
        })
    }
}

/// A validated `/v1/settle`: which reservation, and its final cost (0 to [`MAX_COST`]: 0
/// gives the whole estimate back).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettleInput {
    pub reservation: String,
    pub cost: u64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SettleBody {
    reservation: Option<String>,
    cost: Option<serde_json::Number>,
}

impl SettleInput {
    pub fn parse_json(bytes: &[u8]) -> Result<Self, InputError> {
        let body: SettleBody = serde_json::from_slice(bytes)
            .map_err(|e| invalid("body", format!("invalid JSON body: {e}")))?;
        let reservation = body.reservation.ok_or_else(|| {
            invalid(
                "reservation",
                "`reservation` is required: the id /v1/reserve answered",
            )
        })?;
        if !keys::is_reservation_id(&reservation) {
            return Err(invalid(
                "reservation",
                "`reservation` must be the id /v1/reserve answered (32 hex digits)",
            ));
        }
        let cost = body.cost.ok_or_else(|| {
            invalid(
                "cost",
                "`cost` is required: the request's final cost (0 gives the whole estimate back)",
            )
        })?;
        let cost = cost.as_u64().filter(|c| *c <= MAX_COST).ok_or_else(|| {
            invalid(
                "cost",
                format!("`cost` must be a whole number from 0 to {MAX_COST}, not {cost}"),
            )
        })?;
        Ok(Self { reservation, cost })
    }
}

/// A validated `/v1/release`: which lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReleaseInput {
    pub lease: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReleaseBody {
    lease: Option<String>,
}

impl ReleaseInput {
    pub fn parse_json(bytes: &[u8]) -> Result<Self, InputError> {
        let body: ReleaseBody = serde_json::from_slice(bytes)
            .map_err(|e| invalid("body", format!("invalid JSON body: {e}")))?;
        let lease = body
            .lease
            .ok_or_else(|| invalid("lease", "`lease` is required: the id the check answered"))?;
        if !keys::is_reservation_id(&lease) {
            return Err(invalid(
                "lease",
                "`lease` must be the id the check answered (32 hex digits)",
            ));
        }
        Ok(Self { lease })
    }
}

/// Most descriptors in one gRPC `ShouldRateLimit` request.
pub const MAX_DESCRIPTORS: usize = 16;

/// One Envoy rate-limit descriptor: its entries (key and value, in order), what it costs,
/// and the limit it asks for itself, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Descriptor {
    pub entries: Vec<(String, String)>,
    pub cost: Cost,
    pub limit: Option<LimitOverride>,
}

/// A limit a request sets for its descriptor (Envoy's `RateLimitOverride`): honoured only by
/// rules that allow it, validated as a rule's limit and period are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitOverride {
    pub limit: u64,
    pub period_ms: u64,
}

impl LimitOverride {
    /// `limit` requests per `period_ms`; a limit the limiter cannot take is an [`InputError`].
    pub fn new(limit: u64, period_ms: u64) -> Result<Self, InputError> {
        if limit == 0 || limit > app::rules::MAX_LIMIT {
            return Err(invalid(
                "limit",
                format!(
                    "an override's requests_per_unit is 1 to {}, not {limit}",
                    app::rules::MAX_LIMIT
                ),
            ));
        }
        if !(app::rules::MIN_PERIOD_MS..=app::rules::MAX_PERIOD_MS).contains(&period_ms) {
            return Err(invalid(
                "limit",
                "an override's unit is not one the limiter takes",
            ));
        }
        Ok(Self { limit, period_ms })
    }
}

impl Descriptor {
    /// A descriptor of `entries` costing `hits` (Envoy's `hits_addend`; 0 means 1). Keys and
    /// values are text like routes and subjects; `field` names it in an error.
    pub fn new(entries: Vec<(String, String)>, hits: u64) -> Result<Self, InputError> {
        if entries.is_empty() || entries.len() > app::rules::MAX_DESCRIPTOR_ENTRIES {
            return Err(invalid(
                "descriptors",
                format!(
                    "a descriptor has 1 to {} entries, not {}",
                    app::rules::MAX_DESCRIPTOR_ENTRIES,
                    entries.len()
                ),
            ));
        }
        for (key, value) in &entries {
            check_text("an entry's key", key).map_err(|m| invalid("descriptors", m))?;
            check_text(&format!("the value of entry {key:?}"), value)
                .map_err(|m| invalid("descriptors", m))?;
        }
        let cost = if hits == 0 {
            Cost::ONE
        } else {
            Cost::parse(hits)
                .map_err(|e| invalid("hits_addend", e.message.replace("`cost`", "`hits_addend`")))?
        };
        Ok(Self {
            entries,
            cost,
            limit: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bodys_strings_are_borrowed_unless_escaped() {
        let plain: CheckBody<'_> =
            serde_json::from_slice(br#"{"route":"GET /x","subject":"u1"}"#).unwrap();
        assert!(matches!(plain.route.unwrap().0, Cow::Borrowed("GET /x")));
        assert!(matches!(plain.subject.unwrap().0, Cow::Borrowed("u1")));
        let escaped: CheckBody<'_> = serde_json::from_slice(br#"{"route":"GET /\u0078"}"#).unwrap();
        assert!(matches!(escaped.route.unwrap().0, Cow::Owned(s) if s == "GET /x"));
    }

    fn parse(json: &str) -> Result<CheckInput, InputError> {
        CheckInput::parse_json(json.as_bytes())
    }

    #[test]
    fn a_full_body_parses_and_cost_defaults_to_one() {
        let input = parse(r#"{"route":"POST /x","subject":"u1","request_id":"r1"}"#).unwrap();
        assert_eq!(input.route.as_str(), "POST /x");
        // Routes are compared in their normal form, the form rules are stored in.
        let spaced = parse(r#"{"route":" post  /x?page=2 "}"#).unwrap();
        assert_eq!(spaced.route.as_str(), "POST /x");
        assert_eq!(input.cost, Cost::ONE);
        assert_eq!(input.subject.unwrap().as_str(), "u1");
        assert_eq!(input.request_id.unwrap().as_str(), "r1");
        assert_eq!(parse(r#"{"route":"a","cost":7}"#).unwrap().cost.get(), 7);
    }

    #[test]
    fn each_bad_field_is_named() {
        let field = |json: &str| parse(json).unwrap_err().field;
        assert_eq!(field("not json"), "body");
        assert_eq!(field(r#"{"route":"a","extra":1}"#), "body");
        assert_eq!(field(r#"{"cost":1}"#), "route");
        assert_eq!(field(r#"{"route":""}"#), "route");
        assert_eq!(field(r#"{"route":"   "}"#), "route");
        assert_eq!(
            field(&format!(r#"{{"route":"{}"}}"#, "a".repeat(257))),
            "route"
        );
        assert_eq!(field(r#"{"route":"a\u0007"}"#), "route");
        for cost in ["0", "-1", "1.5", "1000001", "1e30"] {
            assert_eq!(field(&format!(r#"{{"route":"a","cost":{cost}}}"#)), "cost");
        }
        assert_eq!(field(r#"{"route":"a","subject":""}"#), "subject");
        assert_eq!(field(r#"{"route":"a","request_id":""}"#), "request_id");
        let long_id = "r".repeat(MAX_REQUEST_ID_BYTES + 1);
        assert_eq!(
            field(&format!(r#"{{"route":"a","request_id":"{long_id}"}}"#)),
            "request_id"
        );
    }

    #[test]
    fn a_simulation_is_validated_by_the_same_rules() {
        let ok = SimulateInput {
            route: "GET /a".into(),
            subject: Some("s".into()),
            cost: Some(3),
        };
        assert_eq!(CheckInput::from_simulation(&ok).unwrap().cost.get(), 3);
        let zero = SimulateInput {
            cost: Some(0),
            ..ok.clone()
        };
        assert_eq!(
            CheckInput::from_simulation(&zero).unwrap_err().field,
            "cost"
        );
        let blank = SimulateInput {
            route: String::new(),
            ..ok
        };
        assert_eq!(
            CheckInput::from_simulation(&blank).unwrap_err().field,
            "route"
        );
    }

    #[test]
    fn newtypes_refuse_what_the_body_refuses() {
        assert!(Route::parse("GET /").is_ok());
        assert!(Subject::parse(&"s".repeat(256)).is_ok());
        assert!(Subject::parse(&"s".repeat(257)).is_err());
        assert!(Cost::parse(MAX_COST).is_ok());
        assert!(Cost::parse(0).is_err());
        assert!(RequestId::parse(&"r".repeat(MAX_REQUEST_ID_BYTES)).is_ok());
    }

    mod properties {
        use super::super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn any_bytes_parse_or_name_the_field_at_fault(
                bytes in proptest::collection::vec(any::<u8>(), 0..300)
            ) {
                if let Err(e) = CheckInput::parse_json(&bytes) {
                    prop_assert!(["body", "route", "cost", "subject", "request_id"].contains(&e.field));
                }
            }

            #[test]
            fn any_json_object_parses_or_names_the_field_at_fault(
                route in proptest::option::of("\\PC{0,300}"),
                cost in proptest::option::of(any::<i64>()),
                subject in proptest::option::of("\\PC{0,300}"),
                request_id in proptest::option::of("\\PC{0,150}"),
            ) {
                let body = serde_json::json!({
                    "route": route, "cost": cost, "subject": subject, "request_id": request_id
                });
                match CheckInput::parse_json(body.to_string().as_bytes()) {
                    Ok(input) => {
                        // Read back in its normal form.
                        let normal = route.as_deref().map(|r| normal_route(r).into_owned());
                        prop_assert_eq!(Some(input.route.as_str()), normal.as_deref());
                        prop_assert_eq!(input.cost.get(), cost.map_or(1, |c| c as u64));
                    }
                    Err(e) => prop_assert!(["route", "cost", "subject", "request_id"].contains(&e.field)),
                }
            }

            #[test]
            fn a_valid_body_reads_back_field_for_field(
                route in "[A-Z]{3,7} /[a-z0-9/{}._-]{0,200}",
                cost in 1..=MAX_COST,
                subject in proptest::option::of("[ -~]{1,256}"),
                request_id in proptest::option::of("[a-zA-Z0-9-]{1,128}"),
            ) {
                let body = serde_json::json!({
                    "route": route, "cost": cost, "subject": subject, "request_id": request_id
                });
                let input = CheckInput::parse_json(body.to_string().as_bytes()).unwrap();
                prop_assert_eq!(input.route.as_str(), route.as_str());
                prop_assert_eq!(input.cost.get(), cost);
                prop_assert_eq!(input.subject.as_ref().map(Subject::as_str), subject.as_deref());
                prop_assert_eq!(input.request_id.as_ref().map(RequestId::as_str), request_id.as_deref());
            }

            #[test]
            fn a_cost_outside_one_to_the_maximum_is_refused(
                cost in prop_oneof![i64::MIN..1, (MAX_COST as i64 + 1)..i64::MAX]
            ) {
                let body = serde_json::json!({ "route": "GET /", "cost": cost });
                let e = CheckInput::parse_json(body.to_string().as_bytes()).unwrap_err();
                prop_assert_eq!(e.field, "cost");
            }
        }
    }
}
