// Docker health check of a platform node: GET /status on the given port (the gateway's, or the service's ops port)
// answers 200. Plain Node (no curl in the slim image, no TypeScript loader needed for a probe every few seconds).
const port = Number(process.argv[2]);
if (!Number.isInteger(port) || port < 1 || port > 65535) {
	console.error("usage: node deploy/healthcheck.js <port>");
	process.exit(2);
}
fetch(`http://127.0.0.1:${port}/status`, { signal: AbortSignal.timeout(4000) }).then(
	(res) => process.exit(res.status === 200 ? 0 : 1),
	() => process.exit(1),
);
