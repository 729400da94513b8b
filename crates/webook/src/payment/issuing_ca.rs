//! The CA(s) an operator may name (`wechatpay_platform_ca`) that must have issued WeChat Pay's
//! platform certificates: read from PEM by the settings, checked against each downloaded
//! certificate by [`super::certificates`] (issuer name, `sha256WithRSAEncryption`, signature).

use rustls_pki_types::{pem::PemObject, CertificateDer};
use x509_cert::{
    der::{oid::ObjectIdentifier, Decode, Encode},
    Certificate,
};

/// `sha256WithRSAEncryption`: how WeChat's CA signs platform certificates.
const SHA256_WITH_RSA: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.11");

/// A CA that must have issued the downloaded platform certificates (`wechatpay_platform_ca`).
#[derive(Clone)]
pub struct IssuingCa {
    /// DER of its subject name: a certificate's issuer must be this.
    subject: Vec<u8>,
    /// SubjectPublicKeyInfo DER: a certificate's signature must verify with it.
    public_key: Vec<u8>,
}

impl std::fmt::Debug for IssuingCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IssuingCa").finish_non_exhaustive()
    }
}

impl IssuingCa {
    /// Every certificate of a PEM text (one or more `-----BEGIN CERTIFICATE-----`).
    pub fn from_pem(pem: &str) -> Result<Vec<Self>, String> {
        let certificates = CertificateDer::pem_slice_iter(pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|err| format!("not PEM certificates: {err}"))?;
        if certificates.is_empty() {
            return Err("no PEM certificate (-----BEGIN CERTIFICATE-----)".to_owned());
        }
        certificates
            .iter()
            .map(|der| {
                let certificate = Certificate::from_der(der)
                    .map_err(|err| format!("not an X.509 certificate: {err}"))?;
                let tbs = certificate.tbs_certificate();
                Ok(Self {
                    subject: tbs.subject().to_der().map_err(|err| err.to_string())?,
                    public_key: tbs
                        .subject_public_key_info()
                        .to_der()
                        .map_err(|err| err.to_string())?,
                })
            })
            .collect()
    }

    /// Whether this CA issued `certificate`: issuer name, algorithm and signature.
    pub(super) fn issued(&self, certificate: &Certificate) -> bool {
        let tbs = certificate.tbs_certificate();
        let issuer_matches = tbs
            .issuer()
            .to_der()
            .is_ok_and(|issuer| issuer == self.subject);
        let (Ok(signed), Some(signature)) = (tbs.to_der(), certificate.signature().as_bytes())
        else {
            return false;
        };
        issuer_matches
            && certificate.signature_algorithm().oid == SHA256_WITH_RSA
            && aws_lc_rs::signature::UnparsedPublicKey::new(
                &aws_lc_rs::signature::RSA_PKCS1_2048_8192_SHA256,
                &self.public_key,
            )
            .verify(&signed, signature)
            .is_ok()
    }
}
