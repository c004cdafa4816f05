/**
 * The platform's admin console: a browser client of the public REST API (docs/console.md). Served at /console by
 * the gateway (runtime/console-page.ts); every view is an address below it (history routing), reached after
 * sign-in. Nothing here is trusted: every action is decided by the API, whose refusals are shown as they come.
 */
import { render } from "preact";
import { useEffect, useState } from "preact/hooks";
import "./style.css";
import { currentSession, onSessionChange, signOut } from "./api";
import { loadCatalog, type Catalog } from "./catalog";
import { ACCESS_VIEWS, Grants } from "./views/access";
import { CollectionView, NewDocument } from "./views/collection";
import { DocumentView } from "./views/document";
import { Audit, Metrics, Operations, Status, WebhookDeliveries, Webhooks } from "./views/ops";
import { SignIn } from "./views/signin";
import { ErrorBox, Link, Page, useRoute } from "./ui";

const ACCESS_LINKS: Array<[string, string]> = [
	["/access/tenants", "Tenants"],
	["/access/users", "Users and roles"],
	["/access/groups", "Groups"],
	["/access/apts", "Personal tokens"],
	["/access/grants", "Grants and access"],
];
const OPS_LINKS: Array<[string, string]> = [
	["/ops/status", "Status"],
	["/ops/metrics", "Metrics"],
	["/ops/webhooks", "Webhooks"],
	["/ops/audit", "Audit trail"],
];

function NavList({ items, here }: { items: Array<[string, string]>; here: (to: string) => "page" | undefined }) {
	return (
		<ul>
			{items.map(([to, label]) => (
				<li key={to}>
					<Link to={to} aria-current={here(to)}>
						{label}
					</Link>
				</li>
			))}
		</ul>
	);
}

function Nav({ catalog, path }: { catalog: Catalog; path: string }) {
	const here = (to: string) => (path === to || path.startsWith(`${to}/`) ? ("page" as const) : undefined);
	return (
		<nav class="side" aria-label="Console">
			<details open={matchMedia("(min-width: 900px)").matches}>
				<summary>Menu</summary>
				<h2>Identity and access</h2>
				<NavList here={here} items={ACCESS_LINKS} />
				<h2>
					<Link to="/ops" aria-current={path === "/ops" ? "page" : undefined}>
						Operations
					</Link>
				</h2>
				<NavList here={here} items={OPS_LINKS} />
				<h2>Collections</h2>
				{catalog.services.map((s) => (
					<details key={s.name} class="domain" open={path.startsWith(`/${s.name}/`)}>
						<summary>{s.name}</summary>
						<ul>
							{s.collections.map((c) => (
								<li key={c.name}>
									<Link to={`/${s.name}/${c.name}`} aria-current={here(`/${s.name}/${c.name}`)}>
										{c.name}
									</Link>
								</li>
							))}
						</ul>
					</details>
				))}
			</details>
		</nav>
	);
}

function Home({ catalog }: { catalog: Catalog }) {
	return (
		<Page title="Collections">
			<p class="muted">Every collection of the platform, by domain. You see the documents and fields your grants allow.</p>
			<div class="domains">
				{catalog.services.map((s) => (
					<section key={s.name} class="panel" aria-labelledby={`d-${s.name}`}>
						<h2 id={`d-${s.name}`}>{s.name}</h2>
						<ul>
							{s.collections.map((c) => (
								<li key={c.name}>
									<Link to={`/${s.name}/${c.name}`}>{c.name}</Link> <span class="muted">{c.description}</span>
								</li>
							))}
						</ul>
					</section>
				))}
			</div>
		</Page>
	);
}

function Routed({ catalog, path }: { catalog: Catalog; path: string }) {
	const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
	if (!parts.length) return <Home catalog={catalog} />;
	if (parts[0] === "access" && parts.length === 2) {
		if (parts[1] === "grants") return <Grants catalog={catalog} />;
		const View = ACCESS_VIEWS[parts[1] as keyof typeof ACCESS_VIEWS];
		if (View) return <View />;
	}
	if (parts[0] === "ops") {
		if (parts.length === 1) return <Operations catalog={catalog} />;
		if (parts[1] === "status") return <Status />;
		if (parts[1] === "metrics") return <Metrics />;
		if (parts[1] === "webhooks") return parts.length === 3 ? <WebhookDeliveries key={parts[2]} id={parts[2]} /> : <Webhooks />;
		if (parts[1] === "audit" && parts.length === 2) return <Audit />;
	}
	const col = parts.length >= 2 ? catalog.find(parts[0], parts[1]) : undefined;
	if (col && parts.length === 2) return <CollectionView key={path} catalog={catalog} col={col} />;
	if (col && parts.length === 3) return parts[2] === "new" ? <NewDocument col={col} /> : <DocumentView col={col} id={parts[2]} />;
	return (
		<Page title="Not found">
			<p>
				Nothing here. <Link to="/">All collections</Link>
			</p>
		</Page>
	);
}

function App({ rootClient }: { rootClient: string }) {
	const { path } = useRoute();
	const [, tick] = useState(0);
	const [ready, setReady] = useState(false);
	const [catalog, setCatalog] = useState<Catalog | undefined>(undefined);
	const [error, setError] = useState<unknown>(undefined);
	useEffect(() => onSessionChange(() => tick((n) => n + 1)), []);
	const session = currentSession();
	useEffect(() => {
		if (!session) setReady(false);
	}, [session]);
	useEffect(() => {
		if (ready && !catalog) loadCatalog().then(setCatalog, setError);
	}, [ready]);
	// Focus moves to the new view's title, so a keyboard or screen-reader user lands on what changed.
	useEffect(() => document.getElementById("page-title")?.focus(), [path, catalog]);

	if (!session || !ready) return <SignIn rootClient={rootClient} onDone={() => setReady(true)} />;
	const who = session.claims;
	return (
		<div class="layout">
			<a class="skip" href="#main">
				Skip to content
			</a>
			<header class="top">
				<Link to="/" class="brand">
					Platform console
				</Link>
				<span class="who" title={`client ${who.cid}`}>
					{who.uid ? `user ${who.uid}` : `client ${who.cid}`} · {who.domain}
				</span>
				<button type="button" class="secondary" onClick={() => void signOut("You signed out.")}>
					Sign out
				</button>
			</header>
			{catalog ? <Nav catalog={catalog} path={path} /> : <nav class="side" aria-label="Console" />}
			<main id="main">
				<ErrorBox error={error} />
				{catalog ? <Routed catalog={catalog} path={path} /> : !error && <p aria-busy="true">Loading the catalog…</p>}
			</main>
		</div>
	);
}

const root = document.getElementById("app")!;
render(<App rootClient={root.dataset.rootClient ?? ""} />, root);
