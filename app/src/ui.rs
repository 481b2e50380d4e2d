//! Small pieces every page uses: dates, error notes, the inline confirmation, and the form
//! that posts to a server function with or without script.

use leptos::prelude::*;
use leptos::server_fn::codec::PostUrl;
use leptos::server_fn::{Http, ServerFn};
use leptos::wasm_bindgen::JsCast;
use leptos::web_sys::{FormData, HtmlFormElement};

use crate::error::AppError;

/// Days since 1970-01-01 to a (year, month, day) date in the proleptic Gregorian calendar.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    // Eras of 400 years (146,097 days) shifted so that a year starts on 1 March; the leap
    // day is then the last day of a year.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// The inverse of [`civil_from_days`].
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `YYYY-MM-DD HH:MM:SS` (UTC) for a Unix time in milliseconds.
pub fn format_utc(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (y, mo, d) = civil_from_days(secs.div_euclid(86_400));
    let in_day = secs.rem_euclid(86_400);
    format!(
        "{y:04}-{mo:02}-{d:02} {:02}:{:02}:{:02}",
        in_day / 3600,
        in_day / 60 % 60,
        in_day % 60
    )
}

/// Reads `YYYY-MM-DDTHH:MM` (what a `datetime-local` input gives; seconds optional) as UTC
/// and returns Unix milliseconds.
pub fn parse_utc(text: &str) -> Result<i64, String> {
    let bad = || format!("{text:?} is not a date and time like 2026-11-30T14:05");
    let (date, time) = text.trim().split_once(['T', ' ']).ok_or_else(bad)?;
    let mut date_parts = date.split('-');
    let number = |max: u32, s: Option<&str>| -> Result<u32, String> {
        s.and_then(|s| s.parse::<u32>().ok())
            .filter(|n| *n <= max)
            .ok_or_else(bad)
    };
    let year = number(9999, date_parts.next())?;
    let month = number(12, date_parts.next())?;
    let day = number(31, date_parts.next())?;
    let mut time_parts = time.split(':');
    let hour = number(23, time_parts.next())?;
    let minute = number(59, time_parts.next())?;
    let second = match time_parts.next() {
        Some(s) => number(59, Some(s))?,
        None => 0,
    };
    if month == 0 || day == 0 || date_parts.next().is_some() || time_parts.next().is_some() {
        return Err(bad());
    }
    let days = days_from_civil(i64::from(year), month, day);
    if civil_from_days(days) != (i64::from(year), month, day) {
        return Err(format!("{date} is not a day of the calendar"));
    }
    Ok(((days * 86_400) + i64::from(hour * 3600 + minute * 60 + second)) * 1000)
}

/// A wait or a duration in the largest units that read well: `now`, `350 ms`, `2.5 s`,
/// `4 min 10 s`, `2 h 5 min`, `3 d 4 h`.
pub fn human_ms(ms: u64) -> String {
    const S: u64 = 1_000;
    const MIN: u64 = 60 * S;
    const H: u64 = 60 * MIN;
    const D: u64 = 24 * H;
    let two = |big: u64, big_unit: &str, small: u64, small_unit: &str| {
        if small == 0 {
            format!("{big} {big_unit}")
        } else {
            format!("{big} {big_unit} {small} {small_unit}")
        }
    };
    match ms {
        0 => "now".to_owned(),
        1..S => format!("{ms} ms"),
        // Rounded to tenths of a second, 59.95 s and up is a minute.
        S..59_950 => {
            let tenths = (ms + 50) / 100;
            if tenths.is_multiple_of(10) {
                format!("{} s", tenths / 10)
            } else {
                format!("{}.{} s", tenths / 10, tenths % 10)
            }
        }
        59_950..H => {
            let ms = ms.max(MIN);
            two(ms / MIN, "min", ms % MIN / S, "s")
        }
        H..D => two(ms / H, "h", ms % H / MIN, "min"),
        _ => two(ms / D, "d", ms % D / H, "h"),
    }
}

/// An optional time, or a dash.
pub fn format_maybe(ms: Option<i64>) -> String {
    ms.map_or_else(|| "—".to_owned(), format_utc)
}

/// An error, said plainly, with what to do next.
#[component]
pub fn ErrorNote(error: AppError) -> impl IntoView {
    let hint = match &error {
        AppError::Unauthorized => Some(view! { " " <a href="/sign-in">"Sign in"</a> }.into_any()),
        AppError::NotFound => {
            Some(view! { " It does not exist, or it belongs to another tenant." }.into_any())
        }
        e if e.is_transient() => Some(view! { " Try again in a moment." }.into_any()),
        _ => None,
    };
    view! { <p class="error" role="alert" data-testid="error">{error.to_string()}{hint}</p> }
}

/// Moves the focus to the element with this id once the browser has drawn the next frame, so
/// that an element which is only now appearing (a result, a form) is there to take it. Does
/// nothing on the server.
pub fn focus_soon(id: impl Into<String>) {
    let id: String = id.into();
    #[cfg(feature = "hydrate")]
    request_animation_frame(move || {
        let element = document()
            .get_element_by_id(&id)
            .and_then(|e| e.dyn_into::<web_sys::HtmlElement>().ok());
        if let Some(element) = element {
            let _ = element.focus();
        }
    });
    #[cfg(not(feature = "hydrate"))]
    let _ = id;
}

/// The `:tenant` of the current route.
pub fn use_tenant() -> Memo<String> {
    let params = leptos_router::hooks::use_params_map();
    Memo::new(move |_| params.read().get("tenant").unwrap_or_default())
}

/// A button that asks before it acts: the first press shows the question with "Yes, …" (which
/// takes the focus) and "Cancel"; Escape cancels.
#[component]
pub fn ConfirmButton(
    /// The button's label, e.g. "Suspend".
    label: String,
    /// The question shown before acting.
    question: String,
    /// Runs when the user confirms.
    on_confirm: Callback<()>,
    #[prop(optional)] danger: bool,
    #[prop(into, optional)] testid: String,
) -> impl IntoView {
    let (asking, set_asking) = signal(false);
    // After a Cancel (or Escape) the focus goes back to the button that asked.
    let (refocus, set_refocus) = signal(false);
    let cancel = move || {
        set_asking.set(false);
        set_refocus.set(true);
    };
    let trigger = NodeRef::<leptos::html::Button>::new();
    #[cfg(feature = "hydrate")]
    Effect::new(move |_| {
        if refocus.get() {
            if let Some(button) = trigger.get() {
                let _ = button.focus();
                set_refocus.set(false);
            }
        }
    });
    #[cfg(not(feature = "hydrate"))]
    let _ = refocus;
    let confirm_label = format!("Yes, {}", label.to_lowercase());
    let confirm_id = format!("{testid}-confirm");
    // The question takes the focus, so a keyboard user answers it at once; Escape cancels.
    let yes = NodeRef::<leptos::html::Button>::new();
    #[cfg(feature = "hydrate")]
    Effect::new(move |_| {
        if asking.get() {
            if let Some(button) = yes.get() {
                let _ = button.focus();
            }
        }
    });
    let on_key = move |ev: leptos::ev::KeyboardEvent| {
        if ev.key() == "Escape" {
            cancel();
        }
    };
    view! {
        <Show
            when=move || asking.get()
            fallback={
                let label = label.clone();
                let testid = testid.clone();
                move || view! {
                    <button type="button" class:danger=danger data-testid=testid.clone() node_ref=trigger on:click=move |_| set_asking.set(true)>
                        {label.clone()}
                    </button>
                }
            }
        >
            <span class="confirm" role="group" on:keydown=on_key>
                <span class="question">{question.clone()}</span>
                <button
                    type="button"
                    node_ref=yes
                    class:danger=danger
                    data-testid=confirm_id.clone()
                    on:click=move |_| {
                        set_asking.set(false);
                        on_confirm.run(());
                    }
                >
                    {confirm_label.clone()}
                </button>
                <button type="button" class="secondary" on:click=move |_| cancel()>"Cancel"</button>
            </span>
        </Show>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_in_their_largest_units() {
        let cases = [
            (0, "now"),
            (1, "1 ms"),
            (999, "999 ms"),
            (1_000, "1 s"),
            (2_500, "2.5 s"),
            (59_949, "59.9 s"),
            (59_950, "1 min"),
            (59_999, "1 min"),
            (60_000, "1 min"),
            (250_000, "4 min 10 s"),
            (3_600_000, "1 h"),
            (7_500_000, "2 h 5 min"),
            (86_400_000 * 3 + 3_600_000 * 4, "3 d 4 h"),
        ];
        for (ms, said) in cases {
            assert_eq!(human_ms(ms), said, "{ms}");
        }
    }

    #[test]
    fn utc_dates_round_trip() {
        assert_eq!(format_utc(0), "1970-01-01 00:00:00");
        // 2026-11-30T03:05:40Z
        assert_eq!(format_utc(1_796_007_940_000), "2026-11-30 03:05:40");
        assert_eq!(format_utc(951_782_400_000), "2000-02-29 00:00:00");
        assert_eq!(parse_utc("2026-11-30T03:05:40"), Ok(1_796_007_940_000));
        assert_eq!(parse_utc("2000-02-29T00:00"), Ok(951_782_400_000));
        for days in [-1, 0, 59, 60, 10_957, 20_787, 100_000] {
            assert_eq!(
                days_from_civil(
                    civil_from_days(days).0,
                    civil_from_days(days).1,
                    civil_from_days(days).2
                ),
                days
            );
        }
    }

    #[test]
    fn bad_dates_say_what_is_expected() {
        assert!(parse_utc("2026-02-30T00:00")
            .unwrap_err()
            .contains("not a day"));
        assert!(parse_utc("yesterday")
            .unwrap_err()
            .contains("2026-11-30T14:05"));
        assert!(parse_utc("2026-11-30T25:00").is_err());
        assert!(parse_utc("2026-11-30T10:00:00:00").is_err());
    }
}

/// The named fields of a submitted form.
#[derive(Debug)]
pub struct FormFields(FormData);

impl FormFields {
    /// The text of field `name`, empty when the form has no such field.
    pub fn text(&self, name: &str) -> String {
        self.0.get(name).as_string().unwrap_or_default()
    }
}

/// A form that posts to the server function `F`, whose arguments are URL-encoded. Without
/// script the browser posts it, URL-encoded, as the server function reads it; once hydrated, a
/// submit builds the arguments from the form's fields with `args` and dispatches `action`.
/// Leptos's `ActionForm` does the same through a generic URL-encoded deserializer, which costs
/// the browser about 26 KB of gzipped WASM (docs/BENCHMARKS.md, "The console's first load").
#[component]
pub fn PostForm<F, O, A>(action: ServerAction<F>, args: A, children: Children) -> impl IntoView
where
    F: ServerFn<Protocol = Http<PostUrl, O>> + Clone + Send + Sync + 'static,
    F::Output: Send + Sync + 'static,
    F::Error: Send + Sync + 'static,
    A: Fn(&FormFields) -> F + 'static,
{
    let on_submit = move |ev: leptos::ev::SubmitEvent| {
        if ev.default_prevented() {
            return;
        }
        // Should the fields not be readable, the browser posts the form as it would without
        // script.
        let fields = ev
            .target()
            .and_then(|target| target.dyn_into::<HtmlFormElement>().ok())
            .and_then(|form| FormData::new_with_form(&form).ok());
        if let Some(fields) = fields {
            ev.prevent_default();
            action.dispatch(args(&FormFields(fields)));
        }
    };
    view! {
        <form action=F::url() method="post" on:submit=on_submit>
            {children()}
        </form>
    }
}
