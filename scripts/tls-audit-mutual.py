"""Checks a port that requires a client certificate (the cluster bus) against Mozilla's
"intermediate" profile with sslyze, as `sslyze --mozilla_config=intermediate` does for the
other ports.

sslyze 6's SSL 2.0 probe cannot present a client certificate (nassl's SSLv2 client refuses
one: "invalid input, usage, or OpenSSL build configuration"), so the CLI's scan of such a
port ends in an error. Here every scan the profile needs runs with the node's certificate,
the SSL 2.0 probe runs without one (the server must refuse SSL 2.0 before it ever asks for a
certificate), and the profile is checked against the two results together.

Usage: python3 tls-audit-mutual.py HOST PORT CA_FILE CERT_FILE KEY_FILE
Exits 0 when compliant, 1 when not (the issues are printed), 2 when a scan failed.
"""

import dataclasses
import sys
from pathlib import Path

from sslyze import (
    CertificateInfoExtraArgument,
    ClientAuthenticationCredentials,
    Scanner,
    ScanCommand,
    ScanCommandAttemptStatusEnum,
    ScanCommandsExtraArguments,
    ServerNetworkConfiguration,
    ServerNetworkLocation,
    ServerScanRequest,
    ServerScanStatusEnum,
)
from sslyze.mozilla_tls_profile.tls_config_checker import (
    SCAN_COMMANDS_NEEDED_BY_MOZILLA_CHECKER,
    MozillaTlsConfiguration,
    ServerNotCompliantWithTlsConfiguration,
    TlsConfigurationEnum,
    check_server_against_tls_configuration,
)


def scan(location, commands, credentials, ca_file):
    config = ServerNetworkConfiguration(
        tls_server_name_indication=location.hostname, tls_client_auth_credentials=credentials
    )
    extra = ScanCommandsExtraArguments()
    if ScanCommand.CERTIFICATE_INFO in commands:
        extra = ScanCommandsExtraArguments(certificate_info=CertificateInfoExtraArgument(custom_ca_file=ca_file))
    request = ServerScanRequest(
        server_location=location,
        network_configuration=config,
        scan_commands=commands,
        scan_commands_extra_arguments=extra,
    )
    scanner = Scanner()
    scanner.queue_scans([request])
    (result,) = list(scanner.get_results())
    if result.scan_status != ServerScanStatusEnum.COMPLETED:
        sys.exit(f"scan of {location.hostname}:{location.port} did not complete: {result.connectivity_error_trace}")
    for command in commands:
        attempt = getattr(result.scan_result, command.value)
        if attempt.status != ScanCommandAttemptStatusEnum.COMPLETED:
            print(f"{command.value}: {attempt.error_reason} {attempt.error_trace}", file=sys.stderr)
            sys.exit(2)
    return result


def main():
    host, port, ca, cert, key = sys.argv[1:6]
    location = ServerNetworkLocation(host, int(port))
    credentials = ClientAuthenticationCredentials(certificate_chain_path=Path(cert), key_path=Path(key))
    sslv2 = {ScanCommand.SSL_2_0_CIPHER_SUITES}
    with_cert = scan(location, SCAN_COMMANDS_NEEDED_BY_MOZILLA_CHECKER - sslv2, credentials, Path(ca))
    without = scan(location, sslv2, None, Path(ca))
    accepted = without.scan_result.ssl_2_0_cipher_suites.result.accepted_cipher_suites
    print(f"SSL 2.0 cipher suites accepted (probed without a certificate): {len(accepted)}")
    merged = dataclasses.replace(
        with_cert,
        scan_result=dataclasses.replace(
            with_cert.scan_result, ssl_2_0_cipher_suites=without.scan_result.ssl_2_0_cipher_suites
        ),
    )
    r = merged.scan_result
    for label, attempt in [("TLS 1.2", r.tls_1_2_cipher_suites), ("TLS 1.3", r.tls_1_3_cipher_suites)]:
        names = [c.cipher_suite.name for c in attempt.result.accepted_cipher_suites]
        print(f"{label} cipher suites accepted: {', '.join(names) or 'none'}")
    for label, attempt in [
        ("SSL 3.0", r.ssl_3_0_cipher_suites),
        ("TLS 1.0", r.tls_1_0_cipher_suites),
        ("TLS 1.1", r.tls_1_1_cipher_suites),
    ]:
        print(f"{label} cipher suites accepted: {len(attempt.result.accepted_cipher_suites)}")
    print(f"compression: {r.tls_compression.result.supports_compression}")
    reneg = r.session_renegotiation.result
    print(
        f"client-initiated renegotiation: {reneg.is_vulnerable_to_client_renegotiation_dos}, "
        f"secure renegotiation: {reneg.supports_secure_renegotiation}"
    )
    chain = r.certificate_info.result.certificate_deployments[0].received_certificate_chain
    print(f"chain served: {len(chain)} certificates")
    try:
        check_server_against_tls_configuration(
            merged, MozillaTlsConfiguration.get(TlsConfigurationEnum.MOZILLA_INTERMEDIATE)
        )
    except ServerNotCompliantWithTlsConfiguration as e:
        for issue, why in e.issues.items():
            print(f"  {issue}: {why}")
        print(f"{host}:{port}: FAILED - Not compliant.")
        sys.exit(1)
    print(f"{host}:{port}: OK - Compliant.")


if __name__ == "__main__":
    main()
