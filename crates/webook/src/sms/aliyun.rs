//! Alibaba Cloud SMS (to be written).
