//! Tencent Cloud SMS (to be written).
