/**
 * The gateway's /status when a service's health check hangs (runtime/health.ts collectHealth): it answers within its
 * bound whatever hangs, a service that does not answer is `down` with the reason, and the dependencies it reported in
 * its last answer are named `down` with that reason, unless a service that answered reports them. A dependency check
 * that hangs inside a service's health (checkHealth) is `down` with `no answer within 500 ms`.
 */
import { ServiceBroker } from "moleculer";
import { checkHealth, collectHealth, HEALTH_ACTION, HEALTH_TIMED_OUT, type Health } from "../../runtime/health";
import { bindConfig, readConfig } from "../../runtime/config";

const never = () => new Promise<boolean>(() => undefined);

/** What each fake service's health does now: answer this, or hang. */
const answers: Record<string, Health | "hang"> = {};

let broker: ServiceBroker;

beforeAll(async () => {
	broker = new ServiceBroker({ logger: false, metrics: false });
	// The node's own pipeline stages are read from its configuration (the environment's defaults here).
	bindConfig(broker, readConfig());
	// Two catalog domains (the gateway reports every domain), whose health is what the test says.
	for (const name of ["content", "identity"])
		broker.createService({
			name,
			actions: { [HEALTH_ACTION]: { visibility: "public", handler: () => (answers[name] === "hang" ? new Promise(() => undefined) : answers[name]) } },
		});
	await broker.start();
});

afterAll(() => broker.stop());

const up = (kind?: string) => ({ status: "up" as const, ...(kind ? { kind } : {}) });
const timed = async (p: Promise<Health>) => {
	const t0 = Date.now();
	const h = await p;
	return { ms: Date.now() - t0, h };
};

test("a dependency check that hangs is down with its reason after 500 ms, the others answer as they do", async () => {
	const { ms, h } = await timed(checkHealth({ "document store": never, cache: async () => true, "event stream": async () => false }, { "document store": "postgres" }));
	expect(h).toEqual({
		status: "error",
		info: { "document store": { status: "down", kind: "postgres", message: "no answer within 500 ms" }, cache: { status: "up" }, "event stream": { status: "down" } },
	});
	expect(ms).toBeLessThan(800);
});

test("a service that stops answering: down with the reason, the dependencies it reported last named down with it", async () => {
	answers.content = { status: "ok", info: { "document store": up("postgres"), "event stream": up() } };
	answers.identity = { status: "ok", info: { "document store": up("postgres"), cache: up() } };
	const first = await collectHealth(broker);
	expect(first.info["service:content"]).toEqual({ status: "up" });
	expect(first.info["document store"]).toEqual(up("postgres"));
	// A service with no node says so, and reports nothing.
	expect(first.info["service:general"]).toEqual({ status: "down", message: "no node offers it" });

	// identity still answers: what it reports stands; what only content reported is named down with content's reason.
	answers.content = "hang";
	const { ms, h } = await timed(collectHealth(broker));
	expect(ms).toBeLessThan(1000);
	expect(h.status).toBe("error");
	expect(h.info["service:content"]).toEqual({ status: "down", message: "no answer within 800 ms" });
	expect(h.info["service:identity"]).toEqual({ status: "up" });
	expect(h.info["document store"]).toEqual(up("postgres"));
	expect(h.info["event stream"]).toEqual({ status: "down", message: "content: no answer within 800 ms" });
	expect(h.info.cache).toEqual(up());

	// Neither answers: the store is named down, its kind kept.
	answers.identity = "hang";
	const none = await timed(collectHealth(broker));
	expect(none.ms).toBeLessThan(1000);
	expect(none.h.info["document store"]).toEqual({ status: "down", kind: "postgres", message: expect.stringMatching(/^(content|identity): no answer within 800 ms$/) });
	expect(none.h.info.cache).toEqual({ status: "down", message: "identity: no answer within 800 ms" });
});

test("a service that answers down says which of its dependencies are down; one whose checks timed out names its last ones", async () => {
	answers.content = { status: "error", info: { "document store": { status: "down", kind: "postgres", message: "no answer within 500 ms" }, "event stream": up() } };
	answers.identity = { status: "ok", info: { "document store": up("postgres"), cache: up() } };
	const h = await collectHealth(broker);
	expect(h.info["service:content"]).toEqual({ status: "down", message: "down: document store" });
	// A down entry wins over an up one of the same dependency.
	expect(h.info["document store"]).toEqual({ status: "down", kind: "postgres", message: "no answer within 500 ms" });

	answers.identity = HEALTH_TIMED_OUT;
	const t = await collectHealth(broker);
	expect(t.info["service:identity"]).toEqual({ status: "down", message: "down: health" });
	expect(t.info.health).toEqual({ status: "down", message: "health check timed out" });
	expect(t.info.cache).toEqual({ status: "down", message: "identity: health check timed out" });
});
