//! On-demand list prices, us-east-1, in dollars: the one table every AWS bench prices
//! its requests, capacity units and storage by.

#![allow(dead_code, unreachable_pub)]

/// A DynamoDB write request unit (on-demand).
pub const WRITE_UNIT: f64 = 0.625 / 1e6;
/// A DynamoDB read request unit (on-demand).
pub const READ_UNIT: f64 = 0.125 / 1e6;
/// A DynamoDB GB-month of table storage (Standard class).
pub const DYNAMODB_GB_MONTH: f64 = 0.25;
/// An SQS request (standard queue).
pub const SQS_REQUEST: f64 = 0.40 / 1e6;
/// An S3 PUT (S3 Standard).
pub const S3_PUT: f64 = 0.005 / 1e3;
/// An S3 LIST: billed like a PUT.
pub const S3_LIST: f64 = S3_PUT;
/// An S3 GET (S3 Standard).
pub const S3_GET: f64 = 0.0004 / 1e3;
/// An S3 GB-month (S3 Standard, first 50 TB).
pub const S3_GB_MONTH: f64 = 0.023;
