/**
 * Small cryptographic primitives of the platform: the AES wire contract, the base64 "envelope" of it
 * that clients send (x-api-key, TOTP secret), digests, tokens and ObjectIds. Password hashes are runtime/password-hash.ts
 * (they run on thread pools).
 */
import { createCipheriv, createDecipheriv, createHash, hkdfSync, randomBytes, randomFillSync, timingSafeEqual } from "crypto";

const IV_BYTES = 12;
const TAG_BYTES = 16;
// Unpadded base64url; GCM authenticates the bytes, this only keeps "does not parse" strict.
const B64URL = /^[A-Za-z0-9_-]+$/;
// Standard or url alphabet, optional padding: what clients may put around the wire form.
const B64_ANY = /^[A-Za-z0-9+/_-]+={0,2}$/;

/** Purpose label of the key that seals CQRS webhook credentials (context/configs). */
export const CQRS_CREDENTIALS = "platform/cqrs-credentials";
/** Provider keys of a tenant's `SMS` config entries. */
export const SMS_CREDENTIALS = "platform/sms-credentials";
/** Purpose label of the key that seals the answers an Idempotency-Key keeps (a created client's secret, an APT...). */
export const IDEMPOTENT_ANSWERS = "platform/idempotent-answers";
/** The `keys` of a web push subscription (needed to encrypt, so sealed rather than hashed). */
export const PUSH_KEYS = "platform/push-keys";

/**
 * AES-256-GCM per contract: `base64url(iv) + "." + base64url(ciphertext ‖ tag)`. `new Aes(secret)` is the contract key,
 * SHA-256(secret), for the spec's own values (x-api-key, APT cache record, TOTP secret); anything else the platform
 * seals uses `Aes.forPurpose(secret, label)`, so a value sealed for one purpose never opens as another's.
 */
export class Aes {
	private readonly key: Buffer;

	constructor(secret: string, purpose?: string) {
		// Derived once: encrypt/decrypt sit on the request hot path.
		this.key =
			purpose === undefined
				? createHash("sha256").update(secret, "utf8").digest()
				: Buffer.from(hkdfSync("sha256", Buffer.from(secret, "utf8"), Buffer.alloc(0), Buffer.from(purpose, "utf8"), 32));
	}

	/** A key of its own for one purpose: HKDF-SHA256 of the secret with the purpose label as `info` (no salt). */
	static forPurpose(secret: string, purpose: string): Aes {
		if (typeof purpose !== "string" || !purpose) throw new Error("Aes.forPurpose needs a purpose label");
		return new Aes(secret, purpose);
	}

	encrypt(plain: string): string {
		const iv = randomBytes(IV_BYTES);
		const cipher = createCipheriv("aes-256-gcm", this.key, iv, { authTagLength: TAG_BYTES });
		const body = Buffer.concat([cipher.update(plain, "utf8"), cipher.final(), cipher.getAuthTag()]);
		return `${iv.toString("base64url")}.${body.toString("base64url")}`;
	}

	/** null for anything that is not a well-formed, authentic value under this key; never throws. */
	decrypt(wire: string): string | null {
		if (typeof wire !== "string") return null;
		const parts = wire.split(".");
		if (parts.length !== 2 || !B64URL.test(parts[0]) || !B64URL.test(parts[1])) return null;
		const iv = Buffer.from(parts[0], "base64url");
		const body = Buffer.from(parts[1], "base64url");
		// Re-encoding rejects non-canonical spellings (stray trailing bits) of the same bytes.
		if (iv.length !== IV_BYTES || body.length < TAG_BYTES) return null;
		if (iv.toString("base64url") !== parts[0] || body.toString("base64url") !== parts[1]) return null;
		try {
			// authTagLength pins the tag at 16 bytes so a truncated tag cannot be accepted.
			const decipher = createDecipheriv("aes-256-gcm", this.key, iv, { authTagLength: TAG_BYTES });
			decipher.setAuthTag(body.subarray(body.length - TAG_BYTES));
			const plain = Buffer.concat([decipher.update(body.subarray(0, body.length - TAG_BYTES)), decipher.final()]);
			return plain.toString("utf8");
		} catch {
			return null;
		}
	}
}

/**
 * Opens "base64 of the AES encryption": either the wire form itself (base64 has no '.') or standard /
 * url base64 of the wire form's UTF-8 bytes. null when neither decrypts.
 */
export function decryptEnvelope(aes: Aes, value: string): string | null {
	if (typeof value !== "string" || value.length === 0) return null;
	if (value.includes(".")) return aes.decrypt(value);
	if (!B64_ANY.test(value)) return null;
	const wire = Buffer.from(value, "base64").toString("utf8");
	return wire.includes(".") ? aes.decrypt(wire) : null;
}

/** What clients send: standard base64 of the wire form. */
export function encryptEnvelope(aes: Aes, plain: string): string {
	return Buffer.from(aes.encrypt(plain), "utf8").toString("base64");
}

export function sha256Hex(s: string): string {
	return createHash("sha256").update(s, "utf8").digest("hex");
}

/** Constant-time equality; hashing first gives equal-length inputs so the length is not leaked either. */
export function safeEqual(a: string, b: string): boolean {
	const da = createHash("sha256").update(String(a), "utf8").digest();
	const db = createHash("sha256").update(String(b), "utf8").digest();
	return timingSafeEqual(da, db);
}

export function randomToken(bytes: number): string {
	return randomBytes(bytes).toString("base64url");
}

/**
 * Random helper values that are not secrets (a document's `rand`), drawn from a pool of CSPRNG bytes filled 4 KiB at
 * a time (as Node's randomUUID does): one `randomBytes` call per document cost about 3 % of a create's CPU. Each
 * byte is handed out once. Secrets keep `randomToken`, whose bytes are nowhere else in memory.
 */
const POOL = Buffer.alloc(4096);
let poolAt = POOL.length;
export function randomHelper(bytes: number): string {
	if (bytes > POOL.length) return randomToken(bytes);
	if (poolAt + bytes > POOL.length) {
		randomFillSync(POOL);
		poolAt = 0;
	}
	poolAt += bytes;
	return POOL.toString("base64url", poolAt - bytes, poolAt);
}

// ObjectId layout: 4-byte seconds | 5-byte per-process random | 3-byte counter (random start, wraps at 2^24).
const PROCESS_UNIQUE = randomBytes(5);
let counter = randomBytes(3).readUIntBE(0, 3);

export function objectId(): string {
	const buf = Buffer.alloc(12);
	buf.writeUInt32BE(Math.floor(Date.now() / 1000) >>> 0, 0);
	PROCESS_UNIQUE.copy(buf, 4);
	counter = (counter + 1) & 0xffffff;
	buf.writeUIntBE(counter, 9, 3);
	return buf.toString("hex");
}

/** 24 hex digits (either case, as MongoDB accepts). */
export function isObjectId(s: unknown): boolean {
	return typeof s === "string" && /^[0-9a-fA-F]{24}$/.test(s);
}
