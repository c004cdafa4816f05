/** Per-purpose keys (docs/contracts.md "Tenants": sealed values use keys derived per purpose from AES_SECRET). */
import { createDecipheriv, hkdfSync } from "crypto";
import { Aes, CQRS_CREDENTIALS, decryptEnvelope } from "../../lib/crypto";

const SECRET = "s3cret-aes-key";

test("a per-purpose key is HKDF-SHA256(secret, info = label), distinct from the contract key and from other purposes", () => {
	const contract = new Aes(SECRET);
	const cqrs = Aes.forPurpose(SECRET, CQRS_CREDENTIALS);
	const other = Aes.forPurpose(SECRET, "platform/other");
	const wire = cqrs.encrypt('{"cid":"x"}');
	expect(cqrs.decrypt(wire)).toBe('{"cid":"x"}');
	// Never opens under the contract key (x-api-key, TOTP, APT cache) nor under another purpose, and vice versa.
	expect(contract.decrypt(wire)).toBeNull();
	expect(decryptEnvelope(contract, Buffer.from(wire).toString("base64"))).toBeNull();
	expect(other.decrypt(wire)).toBeNull();
	expect(cqrs.decrypt(contract.encrypt("x"))).toBeNull();
	// The derivation itself.
	const key = Buffer.from(hkdfSync("sha256", Buffer.from(SECRET), Buffer.alloc(0), Buffer.from(CQRS_CREDENTIALS), 32));
	const [iv, body] = wire.split(".").map((s) => Buffer.from(s, "base64url"));
	const d = createDecipheriv("aes-256-gcm", key, iv, { authTagLength: 16 });
	d.setAuthTag(body.subarray(body.length - 16));
	expect(Buffer.concat([d.update(body.subarray(0, body.length - 16)), d.final()]).toString()).toBe('{"cid":"x"}');
	expect(() => Aes.forPurpose(SECRET, "")).toThrow();
});
