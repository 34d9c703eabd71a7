//! idem-reports
