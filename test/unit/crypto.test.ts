import { createCipheriv, createHash, randomBytes } from "crypto";
import { Aes, decryptEnvelope, encryptEnvelope, isObjectId, objectId, randomToken, safeEqual, sha256Hex } from "../../lib/crypto";

const WIRE = /^[A-Za-z0-9_-]{16}\.[A-Za-z0-9_-]{22,}$/;

/** Flips one bit of the byte at `index` of a base64url segment. */
function flip(segment: string, index: number): string {
	const buf = Buffer.from(segment, "base64url");
	buf[index] ^= 0x01;
	return buf.toString("base64url");
}

describe("Aes", () => {
	const aes = new Aes("s3cret-aes-key");

	it("round trips text, including empty and non-ASCII", () => {
		for (const plain of ["hello", "", "ünïcødé ✓ 🚀", "x".repeat(5000), '{"a":1}']) {
			expect(aes.decrypt(aes.encrypt(plain))).toBe(plain);
		}
	});

	it("produces the contract wire form without padding", () => {
		const wire = aes.encrypt("payload");
		expect(wire).toMatch(WIRE);
		expect(wire).not.toContain("=");
		const [iv, body] = wire.split(".");
		expect(Buffer.from(iv, "base64url")).toHaveLength(12);
		expect(Buffer.from(body, "base64url")).toHaveLength("payload".length + 16);
	});

	it("uses a fresh IV every time", () => {
		const a = aes.encrypt("same");
		const b = aes.encrypt("same");
		expect(a).not.toBe(b);
		expect(a.split(".")[0]).not.toBe(b.split(".")[0]);
	});

	it("matches the contract: key = SHA-256(secret), ciphertext ‖ tag", () => {
		const key = createHash("sha256").update("s3cret-aes-key", "utf8").digest();
		const iv = randomBytes(12);
		const c = createCipheriv("aes-256-gcm", key, iv);
		const body = Buffer.concat([c.update("external", "utf8"), c.final(), c.getAuthTag()]);
		expect(aes.decrypt(`${iv.toString("base64url")}.${body.toString("base64url")}`)).toBe("external");
	});

	it("rejects tampered tag, iv and ciphertext", () => {
		const [iv, body] = aes.encrypt("important").split(".");
		const bodyLen = Buffer.from(body, "base64url").length;
		expect(aes.decrypt(`${flip(iv, 0)}.${body}`)).toBeNull();
		expect(aes.decrypt(`${iv}.${flip(body, 0)}`)).toBeNull(); // ciphertext
		expect(aes.decrypt(`${iv}.${flip(body, bodyLen - 1)}`)).toBeNull(); // tag
		const truncatedTag = Buffer.from(body, "base64url")
			.subarray(0, bodyLen - 4)
			.toString("base64url");
		expect(aes.decrypt(`${iv}.${truncatedTag}`)).toBeNull();
	});

	it("rejects a value made under another key", () => {
		expect(new Aes("other-key").decrypt(aes.encrypt("secret"))).toBeNull();
	});

	it("returns null for anything unparsable, never throws", () => {
		const good = aes.encrypt("x");
		const [iv, body] = good.split(".");
		const bad: unknown[] = [
			"",
			".",
			"abc",
			`${iv}.`,
			`.${body}`,
			`${iv}.${body}.x`,
			`${iv}=.${body}`,
			`${iv}.${body}==`,
			`${iv.slice(0, 15)}.${body}`, // 11-byte iv
			`${iv}.${Buffer.alloc(15).toString("base64url")}`, // shorter than a tag
			`${iv}.${body.replace(/[A-Za-z0-9]/, "+")}`,
			null,
			undefined,
			42,
		];
		for (const value of bad) expect(aes.decrypt(value as string)).toBeNull();
	});
});

describe("envelope", () => {
	const aes = new Aes("envelope-key");

	it("encryptEnvelope is standard base64 of the wire form", () => {
		const env = encryptEnvelope(aes, "api-key-123");
		expect(env).toMatch(/^[A-Za-z0-9+/]+={0,2}$/);
		const wire = Buffer.from(env, "base64").toString("utf8");
		expect(wire).toMatch(WIRE);
		expect(aes.decrypt(wire)).toBe("api-key-123");
	});

	it("accepts the wire form, standard base64 and url base64 of it", () => {
		const wire = aes.encrypt("totp-secret");
		const std = Buffer.from(wire, "utf8").toString("base64");
		const url = Buffer.from(wire, "utf8").toString("base64url");
		expect(decryptEnvelope(aes, wire)).toBe("totp-secret");
		expect(decryptEnvelope(aes, std)).toBe("totp-secret");
		expect(decryptEnvelope(aes, url)).toBe("totp-secret");
		expect(decryptEnvelope(aes, encryptEnvelope(aes, "round"))).toBe("round");
	});

	it("returns null for junk, other keys and non-wire base64", () => {
		expect(decryptEnvelope(aes, "")).toBeNull();
		expect(decryptEnvelope(aes, "not base64 !")).toBeNull();
		expect(decryptEnvelope(aes, Buffer.from("no dot here").toString("base64"))).toBeNull();
		expect(decryptEnvelope(aes, encryptEnvelope(new Aes("other"), "x"))).toBeNull();
		expect(decryptEnvelope(aes, undefined as unknown as string)).toBeNull();
	});
});

describe("digests and comparison", () => {
	it("sha256Hex matches the known digest", () => {
		expect(sha256Hex("abc")).toBe("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	});

	it("safeEqual compares any lengths", () => {
		expect(safeEqual("token", "token")).toBe(true);
		expect(safeEqual("token", "tokem")).toBe(false);
		expect(safeEqual("token", "token-longer")).toBe(false);
		expect(safeEqual("", "")).toBe(true);
		expect(safeEqual("", "a")).toBe(false);
	});
});

describe("randomToken", () => {
	it("is base64url of the requested bytes and unique", () => {
		const t = randomToken(32);
		expect(t).toMatch(/^[A-Za-z0-9_-]{43}$/);
		expect(Buffer.from(t, "base64url")).toHaveLength(32);
		expect(randomToken(32)).not.toBe(t);
	});
});

describe("objectId", () => {
	it("has the ObjectId format and a current timestamp", () => {
		const before = Math.floor(Date.now() / 1000);
		const id = objectId();
		const after = Math.floor(Date.now() / 1000);
		expect(id).toMatch(/^[0-9a-f]{24}$/);
		const ts = parseInt(id.slice(0, 8), 16);
		expect(ts).toBeGreaterThanOrEqual(before);
		expect(ts).toBeLessThanOrEqual(after);
	});

	it("is unique, shares the process value and increments the counter", () => {
		const ids = Array.from({ length: 1000 }, () => objectId());
		expect(new Set(ids).size).toBe(ids.length);
		expect(new Set(ids.map((id) => id.slice(8, 18))).size).toBe(1);
		for (let i = 1; i < ids.length; i++) {
			const prev = parseInt(ids[i - 1].slice(18), 16);
			expect(parseInt(ids[i].slice(18), 16)).toBe((prev + 1) % 0x1000000);
		}
	});

	it("isObjectId accepts 24 hex digits only", () => {
		expect(isObjectId(objectId())).toBe(true);
		expect(isObjectId("507F1F77BCF86CD799439011")).toBe(true);
		for (const v of ["", "507f1f77bcf86cd79943901", "507f1f77bcf86cd7994390111", "507f1f77bcf86cd79943901g", 123, null, {}]) {
			expect(isObjectId(v)).toBe(false);
		}
	});
});

describe("randomHelper: non-secret random values from a pool", () => {
	test("base64url of the asked length, never repeated across pool refills", async () => {
		const { randomHelper } = await import("../../lib/crypto");
		const seen = new Set<string>();
		// 12 bytes each: about 340 per 4 KiB pool, so 5 000 draws cross 14 refills.
		for (let i = 0; i < 5000; i++) {
			const v = randomHelper(12);
			expect(v).toMatch(/^[A-Za-z0-9_-]{16}$/);
			seen.add(v);
		}
		expect(seen.size).toBe(5000);
		expect(randomHelper(3)).toMatch(/^[A-Za-z0-9_-]{4}$/);
		// Larger than the pool: still random bytes of that length.
		expect(Buffer.from(randomHelper(5000), "base64url").length).toBe(5000);
	});
});
