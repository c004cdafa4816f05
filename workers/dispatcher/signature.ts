/**
 * Standard Webhooks signing (https://www.standardwebhooks.com): headers `webhook-id`, `webhook-timestamp` (Unix
 * seconds) and `webhook-signature: v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">`.
 *
 * Key: a secret written `whsec_<base64>` (the scheme's own format, as its libraries generate) is base64-decoded
 * after the prefix, so a receiver using a Standard Webhooks library verifies it unchanged; any other secret is
 * used as its UTF-8 bytes (what a receiver computing the HMAC by hand with the shared string expects).
 */
import { createHash, createHmac, createSecretKey, timingSafeEqual, type KeyObject } from "crypto";

export function signingKey(secret: string): Buffer {
	return secret.startsWith("whsec_") ? Buffer.from(secret.slice("whsec_".length), "base64") : Buffer.from(secret, "utf8");
}

/** Key objects of the secrets in use (a few per dispatcher: one per client config); emptied when it grows past KEYS. */
const keys = new Map<string, KeyObject>();
const KEYS = 1000;

function keyOf(secret: string): KeyObject {
	let key = keys.get(secret);
	if (!key) {
		if (keys.size >= KEYS) keys.clear();
		key = createSecretKey(signingKey(secret));
		keys.set(secret, key);
	}
	return key;
}

/** `body` as a string is signed as its UTF-8 bytes: the same signature as for those bytes as a Buffer. */
export function sign(secret: string, id: string, timestamp: number, body: string | Buffer): string {
	return `v1,${createHmac("sha256", keyOf(secret)).update(`${id}.${timestamp}.`).update(body).digest("base64")}`;
}

/** Verifies a `webhook-signature` header (space-separated `v1,<sig>` entries): what a receiver does. */
export function verify(secret: string, id: string, timestamp: number, body: string | Buffer, header: string): boolean {
	const expected = Buffer.from(sign(secret, id, timestamp, body).slice(3));
	return header.split(" ").some((entry) => {
		const [version, sig] = entry.split(",", 2);
		if (version !== "v1" || !sig) return false;
		const got = Buffer.from(sig);
		return got.length === expected.length && timingSafeEqual(got, expected);
	});
}

/** `webhook-id`: one per (event, client), the same on every retry and replay, so receivers can deduplicate. */
export function webhookId(eventId: string, clientId: string): string {
	return `msg_${createHash("sha256").update(`${eventId}\n${clientId}`).digest("base64url").slice(0, 32)}`;
}

/** Webhook headers for one attempt: JSON content type, the config's Authorization, the signature when a secret is set. */
export function webhookHeaders(opts: { id: string; body: string | Buffer; authorization?: unknown; secret?: unknown; now?: number }): Record<string, string> {
	const timestamp = Math.floor((opts.now ?? Date.now()) / 1000);
	const headers: Record<string, string> = {
		"content-type": "application/json",
		"user-agent": "platform-dispatcher/1",
		"webhook-id": opts.id,
		"webhook-timestamp": String(timestamp),
	};
	if (typeof opts.authorization === "string" && opts.authorization) headers.authorization = opts.authorization;
	if (typeof opts.secret === "string" && opts.secret) headers["webhook-signature"] = sign(opts.secret, opts.id, timestamp, opts.body);
	return headers;
}
