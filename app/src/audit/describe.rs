//! An audit event as a sentence that names what it changed ("changed rule checkout: limit 10
//! → 20"), read from the event's detail. Events whose detail predates a field are described
//! with what they have.

use serde_json::Value;

use crate::rules::view::describe_rate;

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".to_owned(),
        other => other.to_string(),
    }
}

/// "no session ended", "1 session ended" or "3 sessions ended", from `sessions_ended`.
fn sessions_ended(d: &Value) -> String {
    match d["sessions_ended"].as_u64() {
        Some(0) => "no session ended".to_owned(),
        Some(1) => "1 session ended".to_owned(),
        Some(n) => format!("{n} sessions ended"),
        None => "sessions ended".to_owned(),
    }
}

/// `rule checkout (exact POST /checkout, 3 / 10 min)`, from a rule body's JSON.
fn rule(r: &Value) -> String {
    let applies = match (&r["route"], &r["descriptor"]) {
        (Value::String(route), _) => format!("{} {route}", text(&r["match"])),
        (_, Value::Array(entries)) => format!(
            "descriptor {}",
            entries
                .iter()
                .map(|e| match &e["value"] {
                    Value::String(v) => format!("{}={v}", text(&e["key"])),
                    _ => text(&e["key"]),
                })
                .collect::<Vec<_>>()
                .join(", ")
        ),
        _ => text(&r["match"]),
    };
    let rate = match (r["limit"].as_u64(), r["period_ms"].as_u64()) {
        (Some(limit), Some(period_ms)) => format!(", {}", describe_rate(limit, period_ms)),
        _ => String::new(),
    };
    format!("rule {} ({applies}{rate})", text(&r["name"]))
}

fn names(v: &Value) -> String {
    v.as_array()
        .map(|list| list.iter().map(text).collect::<Vec<_>>().join(", "))
        .unwrap_or_default()
}

/// What an event of `action` with `detail` (its recorded JSON) did, in words.
pub fn describe(action: &str, detail: &str) -> String {
    let d: Value = serde_json::from_str(detail).unwrap_or(Value::Null);
    match action {
        "tenant.create" => format!("created tenant {}", text(&d["name"])),
        "tenant.suspend" => "suspended the tenant: its keys get 403".to_owned(),
        "tenant.resume" => "resumed the tenant".to_owned(),
        "tenant.quotas" => format!(
            "set the tenant's quotas: {} rules, {} keys, {} live buckets",
            text(&d["max_rules"]),
            text(&d["max_keys"]),
            text(&d["max_live_buckets"])
        ),
        "user.create" => format!("added {} {}", text(&d["role"]), text(&d["email"])),
        "rule.create" => format!("created {}", rule(&d)),
        "rule.update" => match d["changes"].as_array() {
            Some(changes) if !changes.is_empty() => format!(
                "changed rule {}: {}",
                text(&d["rule"]["name"]),
                changes
                    .iter()
                    .map(|c| format!(
                        "{} {} → {}",
                        text(&c["field"]),
                        text(&c["before"]),
                        text(&c["after"])
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Some(_) => format!("saved rule {} unchanged", text(&d["rule"]["name"])),
            // Recorded before updates said what changed: the detail is the new rule.
            None => format!("replaced it with {}", rule(&d)),
        },
        "rule.delete" if d["rule"].is_object() => format!("deleted {}", rule(&d["rule"])),
        "rule.delete" => "deleted a rule".to_owned(),
        "rule.reset" => format!(
            "reset rule {}'s bucket for {}{}",
            text(&d["policy"]),
            d["subject"]
                .as_str()
                .map_or_else(|| "the whole tenant".to_owned(), |s| format!("subject {s}")),
            if d["cleared"] == Value::Bool(false) {
                " (it was already empty)"
            } else {
                ""
            }
        ),
        "rules.import" => {
            let mut parts = Vec::new();
            for (verb, list) in [("created", &d["created"]), ("deleted", &d["deleted"])] {
                let listed = names(list);
                if !listed.is_empty() {
                    parts.push(format!("{verb} {listed}"));
                }
            }
            let updated: Vec<String> = d["updated"]
                .as_array()
                .map(|list| {
                    list.iter()
                        .map(|u| match &u["name"] {
                            Value::String(name) => name.clone(),
                            other => text(other),
                        })
                        .collect()
                })
                .unwrap_or_default();
            if !updated.is_empty() {
                parts.push(format!("updated {}", updated.join(", ")));
            }
            let from = d["source"]
                .as_str()
                .unwrap_or("envoyproxy/ratelimit configuration");
            if parts.is_empty() {
                format!("imported a {from} that changed nothing")
            } else {
                format!("imported a {from}: {}", parts.join("; "))
            }
        }
        "override.set" => {
            let o = &d["override"];
            let was = if d["before"].is_object() {
                format!(" (was {})", text(&d["before"]["limit"]))
            } else {
                String::new()
            };
            format!(
                "set the limit of {} under rule {} to {}{was}",
                text(&o["subject"]),
                text(&d["policy"]),
                text(&o["limit"])
            )
        }
        "override.delete" => format!(
            "deleted the override of {}",
            text(&d["override"]["subject"])
        ),
        "key.create" => format!(
            "created {} key {} ({})",
            text(&d["kind"]),
            text(&d["name"]),
            text(&d["prefix"])
        ),
        "key.rotate" => format!(
            "rotated a key: the new one is {}; the old one works {} s more",
            text(&d["prefix"]),
            text(&d["grace_seconds"])
        ),
        "key.revoke" => format!("revoked key {}", text(&d["prefix"])),
        "user.password" => match d["sessions_ended"].as_u64() {
            // The session that changed it counts among those ended (it goes on re-keyed).
            Some(n) if n > 1 => format!(
                "{} changed their password; {} other sessions ended",
                text(&d["email"]),
                n - 1
            ),
            _ => format!("{} changed their password", text(&d["email"])),
        },
        "user.disable" => format!("disabled {}; {}", text(&d["email"]), sessions_ended(&d)),
        "user.enable" => format!("enabled {}", text(&d["email"])),
        "user.reset_password" => format!(
            "reset the password of {}; {}",
            text(&d["email"]),
            sessions_ended(&d)
        ),
        "user.delete" => format!("deleted {}; {}", text(&d["email"]), sessions_ended(&d)),
        "user.sign_out" => format!(
            "signed {} out everywhere; {}",
            text(&d["email"]),
            sessions_ended(&d)
        ),
        "user.sign_out_others" => format!(
            "{} signed out their other sessions; {}",
            text(&d["email"]),
            sessions_ended(&d)
        ),
        "user.sign_in" => format!(
            "{} signed in from {}",
            text(&d["email"]),
            text(&d["client"])
        ),
        "user.sign_in_failed" => format!(
            "a sign-in as {} from {} failed: {}",
            text(&d["email"]),
            text(&d["client"]),
            d["reason"].as_str().unwrap_or("wrong email or password")
        ),
        other => other.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_read_as_sentences_naming_what_changed() {
        let rule = r#"{"name":"checkout","match":"exact","route":"POST /checkout","scope":"tenant","algorithm":"gcra","limit":3,"period_ms":600000}"#;
        let cases = [
            ("rule.create", rule.to_owned(), "created rule checkout (exact POST /checkout, 3 / 10 min)"),
            (
                "rule.update",
                format!(r#"{{"rule":{rule},"changes":[{{"field":"limit","before":"4","after":"3"}}]}}"#),
                "changed rule checkout: limit 4 → 3",
            ),
            ("rule.update", rule.to_owned(), "replaced it with rule checkout (exact POST /checkout, 3 / 10 min)"),
            ("rule.delete", format!(r#"{{"rule":{rule}}}"#), "deleted rule checkout (exact POST /checkout, 3 / 10 min)"),
            ("rule.delete", "{}".to_owned(), "deleted a rule"),
            (
                "rule.reset",
                r#"{"policy":"checkout","subject":null,"cleared":true}"#.to_owned(),
                "reset rule checkout's bucket for the whole tenant",
            ),
            (
                "rules.import",
                r#"{"source":"rules file","created":["fresh"],"updated":[{"name":"search","changes":[]}],"deleted":["old"],"unchanged":1}"#.to_owned(),
                "imported a rules file: created fresh; deleted old; updated search",
            ),
            (
                "override.set",
                r#"{"policy":"per-user","override":{"subject":"acme-*","limit":3},"before":{"subject":"acme-*","limit":2}}"#.to_owned(),
                "set the limit of acme-* under rule per-user to 3 (was 2)",
            ),
            ("key.revoke", r#"{"prefix":"sl_chk_ab12"}"#.to_owned(), "revoked key sl_chk_ab12"),
            (
                "user.password",
                r#"{"email":"ana@example.com","sessions_ended":3}"#.to_owned(),
                "ana@example.com changed their password; 2 other sessions ended",
            ),
            (
                "user.password",
                r#"{"email":"ana@example.com","sessions_ended":1}"#.to_owned(),
                "ana@example.com changed their password",
            ),
            (
                "user.sign_in_failed",
                r#"{"email":"ana@example.com","client":"192.0.2.7"}"#.to_owned(),
                "a sign-in as ana@example.com from 192.0.2.7 failed: wrong email or password",
            ),
            (
                "user.disable",
                r#"{"email":"ana@example.com","sessions_ended":2}"#.to_owned(),
                "disabled ana@example.com; 2 sessions ended",
            ),
            (
                "user.delete",
                r#"{"email":"ana@example.com","sessions_ended":1}"#.to_owned(),
                "deleted ana@example.com; 1 session ended",
            ),
            (
                "user.sign_out_others",
                r#"{"email":"ana@example.com","sessions_ended":2}"#.to_owned(),
                "ana@example.com signed out their other sessions; 2 sessions ended",
            ),
            ("something.new", "not json".to_owned(), "something.new"),
        ];
        for (action, detail, said) in cases {
            assert_eq!(describe(action, &detail), said, "{action} {detail}");
        }
    }
}
