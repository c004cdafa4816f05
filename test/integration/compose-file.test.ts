/**
 * docker-compose.yml as Debian's docker-compose reads it (`docker-compose config`: validated, variables
 * interpolated), without a Docker daemon: the gateway, the 14 domains and the 7 workers, each on PostgreSQL and
 * the NATS change stream with credentials, a health check on its own port, a restart policy, waiting for healthy
 * servers; the servers' own checks; MongoDB only in its profile; the deploy/ configs (NATS, Mosquitto, Prometheus)
 * checked by their servers' own tools when installed. Skips with a message when docker-compose is missing (fails
 * under REQUIRE_SERVERS=1; .ci/run installs it).
 */
import { spawn, spawnSync } from "child_process";
import http from "http";
import { readFileSync } from "fs";
import path from "path";
import { DOMAINS } from "../../catalog";
import { WORKER_PORTS } from "../../workers";

const ROOT = path.resolve(__dirname, "../..");

// Each docker-compose run starts a Python interpreter (about a second on a loaded machine); one test runs eight.
jest.setTimeout(60_000);
const has = (cmd: string) => spawnSync("sh", ["-c", `command -v ${cmd}`], { stdio: "ignore" }).status === 0;

if (!has("docker-compose") && process.env.REQUIRE_SERVERS === "1") throw new Error("docker-compose is not installed (REQUIRE_SERVERS=1)");
if (!has("docker-compose")) console.warn("SKIPPED: docker-compose is not installed (apt-get install docker-compose); the compose file tests are reported as skipped");
const live = has("docker-compose") ? test : test.skip;

/** The secrets the file requires, made up for the test. */
const SECRETS = {
	JWT_SECRET: "jwt-test",
	AES_SECRET: "aes-test",
	POSTGRES_PASSWORD: "pg-test",
	NATS_PASSWORD: "nats-test",
	REDIS_PASSWORD: "redis-test",
	MQTT_PASSWORD: "mqtt-test",
	VAPID_PUBLIC_KEY: "vapid-public-test",
	VAPID_PRIVATE_KEY: "vapid-private-test",
};

/** Only what the test sets: a deployer's own variables (NAMESPACE, MONGO_URI...) must not change the result. */
function compose(args: string[], env: Record<string, string> = SECRETS) {
	return spawnSync("docker-compose", ["-f", "docker-compose.yml", ...args], { cwd: ROOT, env: { PATH: process.env.PATH!, ...env }, encoding: "utf8" });
}

/** YAML to JSON through the Python YAML module Debian's docker-compose itself depends on. */
function yaml(text: string): any {
	const r = spawnSync("python3", ["-c", "import sys, json, yaml; json.dump(yaml.safe_load(sys.stdin), sys.stdout)"], { input: text, encoding: "utf8" });
	if (r.status !== 0) throw new Error(`YAML not read: ${r.stderr}`);
	return JSON.parse(r.stdout);
}

const NODE_PORTS: Record<string, number> = { api: 3010, ...Object.fromEntries(DOMAINS.map((d) => [d.name, d.restPort])), ...WORKER_PORTS };
const SERVERS = ["nats", "redis", "postgres", "mosquitto", "prometheus"];

let config: { services: Record<string, any>; volumes: Record<string, unknown> };

beforeAll(() => {
	if (!has("docker-compose")) return;
	const r = compose(["config"]);
	if (r.status !== 0) throw new Error(`docker-compose config failed: ${r.stderr}`);
	config = yaml(r.stdout);
});

live("the gateway, the 14 domains and the 7 workers each run in their own service of the one image", () => {
	expect(Object.keys(NODE_PORTS)).toHaveLength(22);
	expect(Object.keys(config.services).sort()).toEqual([...Object.keys(NODE_PORTS), ...SERVERS, "mongo"].sort());
	for (const name of Object.keys(NODE_PORTS)) {
		const s = config.services[name];
		expect([name, s.environment.SERVICES, s.image, s.build.context]).toEqual([name, name, "platform-gateway:latest", ROOT]);
	}
	expect(config.services.api.ports).toEqual([{ published: 3010, target: 3010 }]);
});

live("every node: PostgreSQL documents, the NATS stream with credentials, Redis and Mosquitto with passwords, DATA_DIR on a volume", () => {
	for (const name of Object.keys(NODE_PORTS)) {
		const e = config.services[name].environment;
		expect([name, e.DOCUMENT_STORE, e.EVENT_STREAM, e.DATA_DIR, e.HOST, e.SERVICE_PORTS]).toEqual([name, "postgres", "nats", "/data", "0.0.0.0", "1"]);
		expect([name, e.TRANSPORTER, e.STREAM_URL]).toEqual([name, "nats://platform:nats-test@nats:4222", "nats://platform:nats-test@nats:4222"]);
		expect([name, e.DATABASE_URL, e.REDIS_URL, e.MQTT_URL]).toEqual([
			name,
			"postgres://platform:pg-test@postgres:5432/platform",
			"redis://:redis-test@redis:6379",
			"mqtt://publisher:mqtt-test@mosquitto:1883",
		]);
		expect([name, e.JWT_SECRET, e.AES_SECRET, e.MONGO_URI]).toEqual([name, "jwt-test", "aes-test", ""]);
		expect([name, e.VAPID_PUBLIC_KEY, e.VAPID_PRIVATE_KEY]).toEqual([name, "vapid-public-test", "vapid-private-test"]);
		// Named volumes only where data must outlive a container: the root credentials, the uploaded files.
		const volume = { auth: ["auth:/data:rw"], special: ["files:/data:rw"] }[name] ?? ["/data"];
		expect([name, config.services[name].volumes]).toEqual([name, volume]);
	}
	// Only the auth node seeds, so only it reads the root credentials.
	const withRoot = Object.keys(NODE_PORTS).filter((n) => "PLATFORM_ROOT_PASSWORD" in config.services[n].environment);
	expect(withRoot).toEqual(["auth"]);
});

live("every node has a restart policy, waits for healthy servers and is checked on its own /status port", () => {
	for (const [name, port] of Object.entries(NODE_PORTS)) {
		const s = config.services[name];
		expect([name, s.restart]).toEqual([name, "unless-stopped"]);
		expect([name, s.depends_on]).toEqual([
			name,
			Object.fromEntries(["mosquitto", "nats", "postgres", "redis"].map((d) => [d, { condition: "service_healthy" }])),
		]);
		expect([name, s.healthcheck.test]).toEqual([name, ["CMD", "node", "/app/deploy/healthcheck.js", String(port)]]);
		expect([name, s.healthcheck.interval, s.healthcheck.retries]).toEqual([name, "10s", 5]);
	}
});

live("the servers have their own health checks and restart policies; only Prometheus and the gateway are published", () => {
	const tests = Object.fromEntries(SERVERS.map((n) => [n, config.services[n].healthcheck.test.join(" ")]));
	expect(tests.nats).toBe("CMD wget -q --spider http://127.0.0.1:8222/healthz?js-enabled-only=true");
	expect(tests.redis).toContain("redis-cli -a");
	// The image's entrypoint drops root only for a command that starts with redis-server.
	expect(config.services.redis.command).toEqual(["redis-server", "--requirepass", "redis-test", "--appendonly", "yes"]);
	expect(tests.postgres).toBe("CMD pg_isready -U platform -d platform -h 127.0.0.1");
	expect(tests.mosquitto).toContain("mosquitto_sub -h 127.0.0.1 -u");
	expect(tests.prometheus).toBe("CMD wget -q --spider http://127.0.0.1:9090/-/healthy");
	for (const n of SERVERS) expect([n, config.services[n].restart]).toEqual([n, "unless-stopped"]);
	const published = Object.entries(config.services).filter(([, s]) => s.ports).map(([n, s]) => [n, s.ports]);
	expect(published).toEqual([
		["api", [{ published: 3010, target: 3010 }]],
		["prometheus", ["127.0.0.1:9090:9090/tcp"]], // Debian docker-compose 1.29 prints a host-bound port in the short form
	]);
	// Data that must outlive a recreated container is on named volumes.
	expect(Object.keys(config.volumes).sort()).toEqual(["auth", "files", "mongo", "mosquitto", "nats", "postgres", "prometheus", "redis"]);
	expect(config.services.nats.volumes).toContain("nats:/data:rw");
	expect(config.services.postgres.volumes).toContain("postgres:/var/lib/postgresql/data:rw");
});

live("MongoDB is only in its profile, and no node waits for it", () => {
	const profiled = Object.entries(config.services).filter(([, s]) => s.profiles).map(([n, s]) => [n, s.profiles]);
	expect(profiled).toEqual([["mongo", ["mongo"]]]);
	for (const [n, s] of Object.entries(config.services)) expect([n, Object.keys(s.depends_on ?? {}).includes("mongo")]).toEqual([n, false]);
	const variant = compose(["--profile", "mongo", "config"], { ...SECRETS, MONGO_URI: "mongodb://mongo:27017/platform" });
	expect(variant.status).toBe(0);
	expect(yaml(variant.stdout).services.content.environment.MONGO_URI).toBe("mongodb://mongo:27017/platform");
});

live("a missing secret stops docker-compose before anything starts, naming it", () => {
	for (const k of Object.keys(SECRETS)) {
		const env: Record<string, string> = { ...SECRETS };
		delete env[k];
		const r = compose(["config", "-q"], env);
		expect([k, r.status]).toEqual([k, 1]);
		expect(r.stderr).toContain(`set ${k}`);
	}
	// The file itself holds no secret: each one is a required variable.
	const raw = readFileSync(path.join(ROOT, "docker-compose.yml"), "utf8");
	for (const k of Object.keys(SECRETS)) expect(raw).toContain(`\${${k}:?set ${k}}`);
});

live("Prometheus scrapes every node (every replica, by DNS) on the port its health check uses", () => {
	const prom = yaml(readFileSync(path.join(ROOT, "deploy/prometheus.yml"), "utf8"));
	const job = prom.scrape_configs.find((j: any) => j.job_name === "platform");
	const targets = Object.fromEntries(job.dns_sd_configs.map((c: any) => [c.names.join(), c.port]));
	expect(targets).toEqual(NODE_PORTS);
	expect(job.dns_sd_configs.every((c: any) => c.type === "A")).toBe(true);
	expect(job.metrics_path).toBe("/metrics");
	expect(config.services.prometheus.volumes).toContain(`${path.join(ROOT, "deploy/prometheus.yml")}:/etc/prometheus/prometheus.yml:ro`);
	if (!has("promtool")) return console.warn("promtool not installed: deploy/prometheus.yml checked by this test only");
	const r = spawnSync("promtool", ["check", "config", "deploy/prometheus.yml"], { cwd: ROOT, encoding: "utf8" });
	expect([r.status, r.stdout]).toEqual([0, expect.stringContaining("SUCCESS")]);
});

live("NATS requires the user and password of the environment; Mosquitto listens on every interface, with passwords only", () => {
	expect(config.services.nats.command).toEqual(["-c", "/etc/nats/nats.conf"]);
	expect(config.services.nats.environment).toEqual({ NATS_USER: "platform", NATS_PASSWORD: "nats-test" });
	const conf = readFileSync(path.join(ROOT, "deploy/mosquitto.conf"), "utf8");
	expect(conf).toMatch(/^listener 1883 0\.0\.0\.0$/m);
	expect(conf).toMatch(/^allow_anonymous false$/m);
	expect(conf).toMatch(/^password_file \/mosquitto\/data\/passwd$/m);
	if (!has("nats-server")) return console.warn("nats-server not installed: deploy/nats.conf not checked by the server");
	const check = (env: Record<string, string>) => spawnSync("nats-server", ["-c", "deploy/nats.conf", "-t"], { cwd: ROOT, env: { PATH: process.env.PATH!, ...env }, encoding: "utf8" });
	expect(check({ NATS_USER: "platform", NATS_PASSWORD: "x" }).status).toBe(0);
	const noPassword = check({ NATS_USER: "platform" });
	expect(noPassword.status).not.toBe(0);
	expect(noPassword.stdout + noPassword.stderr).toContain("NATS_PASSWORD");
});

live("the image keeps the app read-only and gives the node user DATA_DIR=/data", () => {
	const docker = readFileSync(path.join(ROOT, "Dockerfile"), "utf8");
	expect(docker).toMatch(/^RUN mkdir -p \/data && chown node:node \/data && chmod 0700 \/data$/m);
	expect(docker).toMatch(/^ENV .*DATA_DIR=\/data/m);
	expect(docker).toMatch(/^USER node$/m);
	expect(docker).toMatch(/^CMD \["node", "--import", "tsx", "start.ts"\]$/m);
	// The health check script the compose file names is in the image (not excluded by .dockerignore).
	expect(readFileSync(path.join(ROOT, ".dockerignore"), "utf8").split("\n")).not.toContain("deploy");
});

test("the nodes' health check script passes on /status 200 only", async () => {
	let answer = 200;
	const server = http.createServer((req, res) => res.writeHead(req.url === "/status" ? answer : 404).end());
	await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
	const port = (server.address() as { port: number }).port;
	const probe = (...args: string[]) =>
		new Promise<number | null>((resolve) => spawn(process.execPath, [path.join(ROOT, "deploy/healthcheck.js"), ...args], { stdio: "ignore" }).once("exit", resolve));
	try {
		expect(await probe(String(port))).toBe(0);
		answer = 503;
		expect(await probe(String(port))).toBe(1);
		expect(await probe("x")).toBe(2);
	} finally {
		await new Promise((r) => server.close(r));
	}
	// Nothing listening: unhealthy, not a hang.
	expect(await probe(String(port))).toBe(1);
});
