//! Payments: orders at a payment provider for what a feature sells (rewards today), their
//! notifications, and the jobs that reconcile them with the provider.

pub mod crypto;
pub mod provider;
pub mod settings;
pub mod wechat;

pub use wechat::WechatPay;
