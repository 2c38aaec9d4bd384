// Every page of the dashboard, in one place (see registry.js).
import './overview.js';
import './ssps.js';
import './views.js';
import './presence.js';
import './backends.js';
import './logs.js';
import './jobs.js';
import './pools.js';
import './operations.js';
import './backups.js';
import './incidents.js';
import './access.js';
import './workflows.js';
import './schedules.js';
