//! Shared by the workflow tests: the harness over the example registry, and a
//! scriptable notify receiver speaking just enough HTTP/1.1.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]
#![allow(dead_code)]

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use siesta_testing::TestEnv;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

/// The example workflows on the exported test harness.
pub(crate) fn env() -> TestEnv {
    TestEnv::new(siesta_workflows::registry())
}

/// The `report` workflow with `url` as its one (default) notify target, as a
/// deployment configures it.
pub(crate) fn reporting_to(url: &str) -> TestEnv {
    let targets =
        siesta_workflows::NotifyTargets::none().with(siesta_workflows::report::DEFAULT_TARGET, url);
    let mut registry = siesta::Registry::new();
    registry.register("report", siesta_workflows::report_with(targets));
    TestEnv::new(registry)
}

/// What the receiver puts in the body of a refusal: it must never reach a run's error.
pub(crate) const REFUSAL_SECRET: &str = "internal-admin-token-0451";

/// How the receiver answers one POST.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Reply {
    /// Answer with this status; a 2xx records the key as seen.
    Status(u16),
    /// Record the key as seen, then never answer (the caller crashes meanwhile).
    RecordThenHang,
}

/// One POST as received.
#[derive(Debug, Clone)]
pub(crate) struct Post {
    pub(crate) path: String,
    pub(crate) key: Option<String>,
    pub(crate) body: serde_json::Value,
}

#[derive(Default)]
struct State {
    replies: VecDeque<Reply>,
    hang_next_connection: bool,
    posts: Vec<Post>,
    lookups: Vec<String>,
    seen: HashSet<String>,
    held: Vec<TcpStream>,
}

/// A notify endpoint: `POST /notify` takes a notice, `GET /notify/{key}` answers 200 or
/// 404 by whether a POST with that key was accepted.
#[derive(Clone)]
pub(crate) struct Receiver {
    pub(crate) url: String,
    state: Arc<Mutex<State>>,
    /// Signalled when a POST was handled or a connection was held unread.
    pub(crate) arrived: Arc<Notify>,
}

impl Receiver {
    pub(crate) async fn start() -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/notify", listener.local_addr().unwrap());
        let receiver = Receiver {
            url,
            state: Arc::default(),
            arrived: Arc::default(),
        };
        let rx = receiver.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let hold = std::mem::take(&mut rx.state().hang_next_connection);
                if hold {
                    // Accepted but never read: the caller's request is lost with it.
                    rx.state().held.push(stream);
                    rx.arrived.notify_one();
                    continue;
                }
                let rx = rx.clone();
                tokio::spawn(async move { rx.serve(stream).await });
            }
        });
        receiver
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap()
    }

    /// Answer the next POSTs like this, in order; after them, 200.
    pub(crate) fn script(&self, replies: impl IntoIterator<Item = Reply>) {
        self.state().replies.extend(replies);
    }

    /// Accept the next connection and never read from it.
    pub(crate) fn hang_next_connection(&self) {
        self.state().hang_next_connection = true;
    }

    pub(crate) fn posts(&self) -> Vec<Post> {
        self.state().posts.clone()
    }

    pub(crate) fn lookups(&self) -> Vec<String> {
        self.state().lookups.clone()
    }

    async fn serve(&self, mut stream: TcpStream) {
        let Some((method, path, headers, body)) = read_request(&mut stream).await else {
            return;
        };
        let (status, text) = match (method.as_str(), path.strip_prefix("/notify")) {
            ("POST", Some("")) => {
                let key = header(&headers, "idempotency-key");
                let post = Post {
                    path: path.clone(),
                    key: key.clone(),
                    body: serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null),
                };
                let reply = {
                    let mut st = self.state();
                    st.posts.push(post);
                    let reply = st.replies.pop_front().unwrap_or(Reply::Status(200));
                    let accepted = matches!(reply, Reply::RecordThenHang)
                        || matches!(reply, Reply::Status(s) if (200..300).contains(&s));
                    if let (true, Some(key)) = (accepted, key) {
                        st.seen.insert(key);
                    }
                    reply
                };
                self.arrived.notify_one();
                match reply {
                    Reply::Status(s) if (200..300).contains(&s) => {
                        (s, format!("{{\"status\":{s}}}"))
                    }
                    Reply::Status(s) => (s, format!("{{\"secret\":\"{REFUSAL_SECRET}\"}}")),
                    Reply::RecordThenHang => {
                        self.state().held.push(stream);
                        return;
                    }
                }
            }
            ("GET", Some(rest)) if rest.starts_with('/') => {
                let key = rest[1..].to_owned();
                let mut st = self.state();
                st.lookups.push(key.clone());
                if st.seen.contains(&key) {
                    (200, "{\"seen\":true}".to_owned())
                } else {
                    (404, "{\"seen\":false}".to_owned())
                }
            }
            _ => (404, "{}".to_owned()),
        };
        let response = format!(
            "HTTP/1.1 {status} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
            reason(status),
            text.len()
        );
        let _ = stream.write_all(response.as_bytes()).await;
        let _ = stream.shutdown().await;
    }
}

type Request = (String, String, Vec<(String, String)>, Vec<u8>);

async fn read_request(stream: &mut TcpStream) -> Option<Request> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next()?.split(' ');
    let method = request_line.next()?.to_owned();
    let path = request_line.next()?.to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = header(&headers, "content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Some((method, path, headers, body))
}

fn header(headers: &[(String, String)], name: &str) -> Option<String> {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.clone())
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        404 => "Not Found",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Status",
    }
}
