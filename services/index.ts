/** Every service a node can run, by the name `SERVICES=` uses. */
import type { ServiceSchema } from "moleculer";
import type { PlatformConfig } from "../runtime/config";
import { apiService } from "./api.service";
import AuthService from "./auth.service";
import DomainService from "./domain.service";
import ContextService from "./context.service";
import EssentialService from "./essential.service";
import FinancialService from "./financial.service";
import GeneralService from "./general.service";
import IdentityService from "./identity.service";
import SpecialService from "./special.service";
import TouchService from "./touch.service";
import ContentService from "./content.service";
import LogisticService from "./logistic.service";
import ConjointService from "./conjoint.service";
import CareerService from "./career.service";
import ThingService from "./thing.service";
import { workerCatalog } from "../workers";

export function serviceCatalog(cfg: PlatformConfig): Record<string, ServiceSchema> {
	return {
		api: apiService(cfg),
		auth: AuthService,
		domain: DomainService,
		context: ContextService,
		essential: EssentialService,
		financial: FinancialService,
		general: GeneralService,
		identity: IdentityService,
		special: SpecialService,
		touch: TouchService,
		content: ContentService,
		logistic: LogisticService,
		conjoint: ConjointService,
		career: CareerService,
		thing: ThingService,
		...workerCatalog(),
	};
}
