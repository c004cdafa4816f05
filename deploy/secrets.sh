#!/bin/sh
# The secrets docker-compose.yml needs, made once beside it: the files its `secrets:` mount under /run/secrets (the
# nodes read them as <NAME>_FILE, PostgreSQL as POSTGRES_PASSWORD_FILE, Prometheus as its bearer token) and a .env
# with the passwords of the servers that read theirs from the environment (NATS, Redis, Mosquitto). Only what is
# missing is made: an existing secret is never replaced (a new AES_SECRET leaves every encrypted value unreadable, a
# new JWT_SECRET every token invalid, a new database password no longer matches the cluster's).
# Needs openssl. Usage: deploy/secrets.sh, then docker-compose up -d (docs/production.md, "Production image").
set -eu
cd "$(dirname "$0")/.."
umask 077
mkdir -p secrets
# The directory keeps the host's other users out; the files are readable by all (0444) because the containers read
# them as their own users (node, nobody, postgres), which a bind-mounted file keeps the host's owner and mode for.
chmod 0700 secrets
b64url() { openssl base64 -A | tr '+/' '-_' | tr -d '='; }
put() { # name value
	[ -e "secrets/$1" ] && return 0
	printf '%s\n' "$2" > "secrets/$1"
	chmod 0444 "secrets/$1"
	echo "secrets/$1 written"
}
put jwt_secret "$(openssl rand 32 | b64url)"
put aes_secret "$(openssl rand 32 | b64url)"
put metrics_token "$(openssl rand 32 | b64url)"
put postgres_password "$(openssl rand -hex 24)"
put database_url "postgres://platform:$(cat secrets/postgres_password)@postgres:5432/platform"
# The Web Push (VAPID) pair, base64url as web-push writes it: the 32-byte P-256 private key, the 65-byte public point.
if [ ! -e secrets/vapid_private_key ]; then
	pem=secrets/.vapid.pem
	openssl ecparam -name prime256v1 -genkey -noout -out "$pem"
	put vapid_private_key "$(openssl ec -in "$pem" -outform DER 2>/dev/null | tail -c +8 | head -c 32 | b64url)"
	rm -f secrets/vapid_public_key
	put vapid_public_key "$(openssl ec -in "$pem" -pubout -outform DER 2>/dev/null | tail -c 65 | b64url)"
	rm -f "$pem"
fi
if [ ! -e .env ]; then
	printf 'NATS_PASSWORD=%s\nREDIS_PASSWORD=%s\nMQTT_PASSWORD=%s\nGRAFANA_PASSWORD=%s\n' "$(openssl rand -hex 24)" "$(openssl rand -hex 24)" "$(openssl rand -hex 24)" "$(openssl rand -hex 24)" > .env
	echo ".env written"
elif ! grep -q '^GRAFANA_PASSWORD=' .env; then
	# An .env of an earlier version: the dashboards' password is added, the rest kept.
	printf 'GRAFANA_PASSWORD=%s\n' "$(openssl rand -hex 24)" >> .env
	echo ".env: GRAFANA_PASSWORD added"
fi
