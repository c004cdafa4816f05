import { createHmac } from "crypto";
import { sign, signingKey, verify, webhookHeaders, webhookId } from "../../workers/dispatcher/signature";
import { retryDelay } from "../../workers/dispatcher.worker";
import { DEFAULT_RETRY_SCHEDULE, retrySchedule } from "../../runtime/config";

test("v1 signature is base64 HMAC-SHA256 over id.timestamp.body with the UTF-8 secret", () => {
	const body = JSON.stringify({ id: "a", op: "c" });
	const expected = createHmac("sha256", Buffer.from("my secret", "utf8")).update(`msg_1.1700000000.${body}`).digest("base64");
	expect(sign("my secret", "msg_1", 1700000000, body)).toBe(`v1,${expected}`);
	expect(verify("my secret", "msg_1", 1700000000, body, `v1,${expected}`)).toBe(true);
	expect(verify("other", "msg_1", 1700000000, body, `v1,${expected}`)).toBe(false);
	expect(verify("my secret", "msg_1", 1700000001, body, `v1,${expected}`)).toBe(false);
});

test("a whsec_ secret is base64-decoded after the prefix (Standard Webhooks libraries)", () => {
	const raw = Buffer.from("0123456789abcdef0123456789abcdef");
	const secret = `whsec_${raw.toString("base64")}`;
	expect(signingKey(secret)).toEqual(raw);
	// The reference test vector of the Standard Webhooks specification.
	const vector = sign("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, '{"test": 2432232314}');
	expect(vector).toBe("v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
});

test("headers: content type, id, timestamp, Authorization and signature only when configured", () => {
	const id = webhookId("123:abc:c", "client1");
	expect(id).toBe(webhookId("123:abc:c", "client1"));
	expect(id).not.toBe(webhookId("123:abc:c", "client2"));
	expect(id).not.toBe(webhookId("124:abc:u", "client1"));
	const plain = webhookHeaders({ id, body: "{}", now: 1_700_000_000_123 });
	expect(plain).toMatchObject({ "content-type": "application/json", "webhook-id": id, "webhook-timestamp": "1700000000" });
	expect(plain.authorization).toBeUndefined();
	expect(plain["webhook-signature"]).toBeUndefined();
	const full = webhookHeaders({ id, body: "{}", authorization: "Bearer x", secret: "s", now: 1_700_000_000_000 });
	expect(full.authorization).toBe("Bearer x");
	expect(verify("s", id, 1700000000, "{}", full["webhook-signature"])).toBe(true);
});

test("a body given as bytes signs like its text; each secret keeps its own key", () => {
	// Non-ASCII and a lone surrogate (sent as U+FFFD): the signature covers the UTF-8 bytes that go on the wire.
	const text = JSON.stringify({ title: "naïve 東京 \ud800", n: 1 });
	const bytes = Buffer.from(text);
	const expected = createHmac("sha256", Buffer.from("k1"))
		.update(Buffer.concat([Buffer.from("msg_1.1700000000."), bytes]))
		.digest("base64");
	expect(sign("k1", "msg_1", 1700000000, text)).toBe(`v1,${expected}`);
	expect(sign("k1", "msg_1", 1700000000, bytes)).toBe(`v1,${expected}`);
	expect(verify("k1", "msg_1", 1700000000, bytes, `v1,${expected}`)).toBe(true);
	// Alternating secrets (and a whsec_ one) never share a key.
	const whsec = `whsec_${Buffer.from("raw key bytes").toString("base64")}`;
	const k2 = sign("k2", "msg_1", 1700000000, bytes);
	const w = sign(whsec, "msg_1", 1700000000, bytes);
	expect(k2).toBe(
		`v1,${createHmac("sha256", "k2")
			.update(Buffer.concat([Buffer.from("msg_1.1700000000."), bytes]))
			.digest("base64")}`,
	);
	expect(w).toBe(
		`v1,${createHmac("sha256", Buffer.from("raw key bytes"))
			.update(Buffer.concat([Buffer.from("msg_1.1700000000."), bytes]))
			.digest("base64")}`,
	);
	expect(sign("k1", "msg_1", 1700000000, bytes)).toBe(`v1,${expected}`);
	const h = webhookHeaders({ id: "msg_1", body: bytes, secret: "k1", now: 1_700_000_000_000 });
	expect(h["webhook-signature"]).toBe(`v1,${expected}`);
});

test("retry schedule: default, env form, jitter bounds", () => {
	expect(DEFAULT_RETRY_SCHEDULE).toEqual([0, 5, 300, 1800, 7200, 18000, 36000, 36000]);
	expect(retrySchedule(undefined)).toEqual(DEFAULT_RETRY_SCHEDULE);
	expect(retrySchedule("0, 0.2,0.4")).toEqual([0, 0.2, 0.4]);
	for (const bad of ["", "a", "1,,2", "-1", "1,x"]) expect(() => retrySchedule(bad)).toThrow(/WEBHOOK_RETRY_SCHEDULE/);
	const s = [0, 5, 300];
	expect(retryDelay(s, 0)).toBe(0);
	expect(retryDelay(s, 1, () => 0)).toBeCloseTo(4);
	expect(retryDelay(s, 1, () => 1)).toBeCloseTo(6);
	expect(retryDelay(s, 2, () => 0.5)).toBeCloseTo(300);
	expect(retryDelay(s, 3)).toBeUndefined();
});
