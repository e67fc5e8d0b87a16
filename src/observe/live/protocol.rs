//! What clients send and what they are answered. Requests are one JSON object a line:
//! `{"type":"control","id":N,"action":"pause"|"resume"|"checkpoint"|"stop","checkpoint":BOOL}`
//! (`checkpoint`: for `stop`, default true) and
//! `{"type":"control","id":N,"action":"batch_size","per_replica":B}`. Each is answered
//! `{"type":"reply","id":N,"ok":BOOL,"message":TEXT}`; what the run then does arrives as its
//! records (a `control` event once every rank has applied it). `{"type":"readonly"}` makes the
//! connection read-only for good: every control it sends after is refused (`attach --readonly`
//! sends it first thing). `{"type":"hello"}` asks to be served at once (see `server`).

use serde_json::{json, Value};

use crate::engine::control::{Control, Controller, MAX_BATCH};
use crate::observe::metrics::Line;

/// The longest request line read.
pub const MAX_REQUEST: usize = 64 * 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    pub id: u64,
    pub control: Control,
}

/// Why a request line was not taken.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Not a request at all: the client is closed after the answer.
    Malformed(String),
    /// A request this server cannot do (an unknown action, a bad batch size): answered.
    Refused { id: u64, message: String },
}

/// The line a client sends first to be served at once (a silent client waits
/// `server::GREETING`; one that closes before is a probe and is sent nothing).
pub const HELLO: &str = "{\"type\":\"hello\"}\n";

/// Whether `text` is the hello.
pub fn is_hello(text: &[u8]) -> bool {
    serde_json::from_slice::<Value>(text)
        .is_ok_and(|v| v.get("type").and_then(Value::as_str) == Some("hello"))
}

/// The line a client sends to make its connection read-only.
pub const READONLY: &str = "{\"type\":\"readonly\"}\n";

/// Whether `text` is the read-only request.
pub fn is_readonly_request(text: &[u8]) -> bool {
    serde_json::from_slice::<Value>(text)
        .is_ok_and(|v| v.get("type").and_then(Value::as_str) == Some("readonly"))
}

pub fn parse_request(text: &[u8]) -> Result<Request, Refusal> {
    let bad = |what: &str| {
        Refusal::Malformed(format!("{what}; send one JSON object a line, such as {{\"type\":\"control\",\"id\":1,\"action\":\"pause\"}}"))
    };
    let v: Value = serde_json::from_slice(text).map_err(|_| bad("not JSON"))?;
    if v.get("type").and_then(Value::as_str) != Some("control") {
        return Err(bad("not a request (`type` is not \"control\")"));
    }
    let id = v
        .get("id")
        .and_then(Value::as_u64)
        .ok_or_else(|| bad("`id` is missing or not a whole number"))?;
    let refuse = |message: String| Refusal::Refused { id, message };
    let action = v.get("action").and_then(Value::as_str).ok_or_else(|| {
        refuse("`action` is missing: use pause, resume, checkpoint, stop or batch_size".into())
    })?;
    let control = match action {
        "pause" => Control::Pause,
        "resume" => Control::Resume,
        "checkpoint" => Control::Checkpoint,
        "stop" => Control::Stop {
            checkpoint: match v.get("checkpoint") {
                None | Some(Value::Null) => true,
                Some(Value::Bool(b)) => *b,
                Some(_) => return Err(refuse("`checkpoint` must be true or false".into())),
            },
        },
        "batch_size" => {
            let given = v.get("per_replica");
            // (a whole number written as a float, 64.0, or past u64's range, 1e20, is one too)
            let whole = given.and_then(Value::as_f64).filter(|f| f.fract() == 0.0);
            match (given.and_then(Value::as_u64), whole) {
                (Some(b), _) => Control::SetBatch(usize::try_from(b).unwrap_or(usize::MAX)),
                (None, Some(f)) if (1.0..=MAX_BATCH as f64).contains(&f) => {
                    Control::SetBatch(f as usize)
                }
                (None, Some(_)) => {
                    return Err(refuse(format!(
                        "`per_replica` {} is out of range: give 1 to {MAX_BATCH} samples per replica",
                        given.map_or(String::new(), Value::to_string)
                    )))
                }
                (None, None) => {
                    return Err(refuse(format!(
                        "`per_replica` is missing or not a whole number: give 1 to {MAX_BATCH} samples per replica"
                    )))
                }
            }
        }
        a => {
            return Err(refuse(format!(
                "unknown action {a:?}: use pause, resume, checkpoint, stop or batch_size"
            )))
        }
    };
    Ok(Request { id, control })
}

/// The line that answers request `id` (`None`: a line that was no request).
pub fn reply(id: Option<u64>, ok: bool, message: &str) -> Line {
    Line::new(&json!({"type": "reply", "id": id, "ok": ok, "message": message}))
}

/// The `live` marker: the run's clock (seconds since its start), and as a client joins, how
/// many clients the run has with it.
pub fn live(t: f64, clients: Option<usize>) -> Line {
    let mut v = json!({"type": "live", "t": t});
    if let Some(n) = clients {
        v["clients"] = n.into();
    }
    Line::new(&v)
}

/// The request's line (what `attach` sends).
pub fn request(id: u64, c: Control) -> Line {
    let mut v = json!({"type": "control", "id": id, "action": c.action()});
    match c {
        Control::Stop { checkpoint } => v["checkpoint"] = checkpoint.into(),
        Control::SetBatch(b) => v["per_replica"] = b.into(),
        Control::Pause | Control::Resume | Control::Checkpoint => {}
    }
    Line::new(&v)
}

/// What a client's requests go to, and who the run's log says asked for them.
pub struct Steering {
    pub controller: Controller,
    pub by: String,
}

/// Applies a request for `steering`'s client; the answer's `ok` and words.
pub fn apply(steering: &Steering, c: Control) -> (bool, String) {
    match (steering.controller).send_for(c, steering.by.clone()) {
        Err(e) => (false, e.to_string()),
        Ok(()) => (
            true,
            match c {
                Control::Pause => {
                    "pause requested: every rank stops at the next step boundary".into()
                }
                Control::Resume => "resume requested".into(),
                Control::Checkpoint => "checkpoint requested at the next step boundary".into(),
                Control::SetBatch(b) => {
                    format!("batch size {b} per replica requested from the next step")
                }
                Control::Stop { checkpoint: true } => {
                    "stop requested: finishing the step and writing a checkpoint".into()
                }
                Control::Stop { checkpoint: false } => {
                    "stop requested: finishing the step, no checkpoint".into()
                }
            },
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_control_round_trips_through_its_request_line() {
        for (i, c) in [
            Control::Pause,
            Control::Resume,
            Control::Checkpoint,
            Control::Stop { checkpoint: true },
            Control::Stop { checkpoint: false },
            Control::SetBatch(64),
        ]
        .into_iter()
        .enumerate()
        {
            let line = request(i as u64, c);
            assert_eq!(
                parse_request(line.as_str().trim().as_bytes()),
                Ok(Request {
                    id: i as u64,
                    control: c
                })
            );
        }
    }

    #[test]
    fn bad_requests_are_refused_or_malformed_never_a_panic() {
        for bad in [
            &b"garbage"[..],
            b"",
            b"[]",
            b"{\"type\":\"control\"}",
            b"{\"type\":\"other\",\"id\":1}",
            b"{\"type\":\"control\",\"id\":-1,\"action\":\"pause\"}",
            b"\xff\xfe",
        ] {
            assert!(
                matches!(parse_request(bad), Err(Refusal::Malformed(_))),
                "{bad:?}"
            );
        }
        for (bad, words) in [
            (
                &br#"{"type":"control","id":3,"action":"fly"}"#[..],
                "unknown action",
            ),
            (
                br#"{"type":"control","id":3,"action":"batch_size"}"#,
                "per_replica",
            ),
            (
                br#"{"type":"control","id":3,"action":"batch_size","per_replica":-4}"#,
                "`per_replica` -4 is out of range: give 1 to 1048576",
            ),
            (
                br#"{"type":"control","id":3,"action":"batch_size","per_replica":2.5}"#,
                "not a whole number",
            ),
            (
                br#"{"type":"control","id":3,"action":"batch_size","per_replica":99999999999999999999}"#,
                "`per_replica` 1e+20 is out of range",
            ),
            (
                br#"{"type":"control","id":3,"action":"stop","checkpoint":"yes"}"#,
                "true or false",
            ),
            (br#"{"type":"control","id":3}"#, "`action` is missing"),
        ] {
            match parse_request(bad) {
                Err(Refusal::Refused { id: 3, message }) => {
                    assert!(message.contains(words), "{message}")
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn a_stop_without_checkpoint_field_writes_one() {
        let r = parse_request(br#"{"type":"control","id":1,"action":"stop"}"#).unwrap();
        assert_eq!(r.control, Control::Stop { checkpoint: true });
    }
}
