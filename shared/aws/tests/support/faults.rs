//! Fault injection below the SDK: an HTTP client that wraps the real one and, on the
//! first attempt of every write, throttles it (without it reaching the service),
//! answers 500 after the service applied it, or times out after the service applied it.
//! The SDK's own retry then sends the same request again, which is exactly the
//! ambiguous case the adapter must resolve without applying a write twice.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpClient,
    SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::{HttpRequest, HttpResponse};
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::body::SdkBody;
use sha2::{Digest, Sha256};

/// What happens to the first attempt of a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// 400 ThrottlingException; the request never reaches the service.
    Throttle,
    /// The service applies the write; the client sees a 500.
    ServerErrorAfterApplied,
    /// The service applies the write; the client's attempt times out waiting.
    TimeoutAfterApplied,
}

/// Counts of what the faulty client did.
#[derive(Debug, Default)]
pub struct FaultCounts {
    /// Writes faulted (each on its first attempt only).
    pub faulted: AtomicUsize,
    /// All requests seen, writes and reads.
    pub requests: AtomicUsize,
}

/// The faulty HTTP client.
#[derive(Debug, Clone)]
pub struct FaultyClient {
    inner: SharedHttpClient,
    fault: Fault,
    /// How long a "timed out" response is held (longer than the attempt timeout).
    hold: Duration,
    seen: Arc<Mutex<HashSet<[u8; 32]>>>,
    pub counts: Arc<FaultCounts>,
}

impl FaultyClient {
    /// Wrap `inner`; timed-out responses are held for `hold`.
    pub fn new(inner: SharedHttpClient, fault: Fault, hold: Duration) -> Self {
        FaultyClient {
            inner,
            fault,
            hold,
            seen: Arc::default(),
            counts: Arc::default(),
        }
    }
}

/// The operations that write a run's state: DynamoDB writes and SQS sends.
fn is_write(target: &str) -> bool {
    [
        "DynamoDB_20120810.TransactWriteItems",
        "DynamoDB_20120810.UpdateItem",
        "DynamoDB_20120810.PutItem",
        "DynamoDB_20120810.DeleteItem",
        "AmazonSQS.SendMessage",
    ]
    .contains(&target)
}

/// A harmless request of the same service, sent instead of a throttled write so that
/// nothing is applied.
fn no_op(target: &str) -> &'static str {
    if target.starts_with("AmazonSQS.") {
        "AmazonSQS.ListQueues"
    } else {
        "DynamoDB_20120810.ListTables"
    }
}

fn canned(status: u16, service: &str, code: &str) -> HttpResponse {
    let body = if service.starts_with("AmazonSQS") {
        format!(r#"{{"__type":"{code}","message":"injected"}}"#)
    } else {
        format!(r#"{{"__type":"com.amazonaws.dynamodb.v20120810#{code}","message":"injected"}}"#)
    };
    let mut response = HttpResponse::new(status.try_into().expect("status"), SdkBody::from(body));
    response
        .headers_mut()
        .insert("content-type", "application/x-amz-json-1.0");
    response
}

#[derive(Debug)]
struct FaultyConnector {
    inner: SharedHttpConnector,
    client: FaultyClient,
}

impl HttpConnector for FaultyConnector {
    fn call(&self, mut request: HttpRequest) -> HttpConnectorFuture {
        let c = &self.client;
        c.counts.requests.fetch_add(1, Ordering::Relaxed);
        let target = request
            .headers()
            .get("x-amz-target")
            .unwrap_or_default()
            .to_owned();
        let first_attempt = is_write(&target) && {
            let mut digest = Sha256::new();
            digest.update(target.as_bytes());
            digest.update(request.body().bytes().unwrap_or_default());
            c.seen.lock().unwrap().insert(digest.finalize().into())
        };
        if !first_attempt {
            return self.inner.call(request);
        }
        c.counts.faulted.fetch_add(1, Ordering::Relaxed);
        let inner = self.inner.clone();
        let (fault, hold) = (c.fault, c.hold);
        HttpConnectorFuture::new(async move {
            match fault {
                Fault::Throttle => {
                    request.headers_mut().insert("x-amz-target", no_op(&target));
                    *request.body_mut() = SdkBody::from("{}");
                    request.headers_mut().remove("content-length");
                    request.headers_mut().insert("content-length", "2");
                    inner.call(request).await?;
                    let code = if target.starts_with("AmazonSQS") {
                        "AWS.SimpleQueueService.RequestThrottled"
                    } else {
                        "ThrottlingException"
                    };
                    Ok(canned(400, &target, code))
                }
                Fault::ServerErrorAfterApplied => {
                    inner.call(request).await?;
                    Ok(canned(500, &target, "InternalServerError"))
                }
                Fault::TimeoutAfterApplied => {
                    let response = inner.call(request).await?;
                    tokio::time::sleep(hold).await;
                    Ok(response)
                }
            }
        })
    }
}

impl HttpClient for FaultyClient {
    fn http_connector(
        &self,
        settings: &HttpConnectorSettings,
        components: &RuntimeComponents,
    ) -> SharedHttpConnector {
        SharedHttpConnector::new(FaultyConnector {
            inner: self.inner.http_connector(settings, components),
            client: self.clone(),
        })
    }
}
