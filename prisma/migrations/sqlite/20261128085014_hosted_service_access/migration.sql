-- CreateTable
CREATE TABLE "ServiceCredential" (
    "id" TEXT NOT NULL PRIMARY KEY,
    "serviceId" TEXT NOT NULL,
    "accountId" TEXT NOT NULL,
    "kind" TEXT NOT NULL,
    "tokenHash" TEXT NOT NULL,
    "returnTo" TEXT NOT NULL DEFAULT '/',
    "sessionId" TEXT,
    "createdAt" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "expiresAt" DATETIME NOT NULL,
    CONSTRAINT "ServiceCredential_serviceId_fkey" FOREIGN KEY ("serviceId") REFERENCES "HostedService" ("id") ON DELETE CASCADE ON UPDATE CASCADE,
    CONSTRAINT "ServiceCredential_accountId_fkey" FOREIGN KEY ("accountId") REFERENCES "Account" ("id") ON DELETE CASCADE ON UPDATE CASCADE
);

-- RedefineTables
PRAGMA defer_foreign_keys=ON;
PRAGMA foreign_keys=OFF;
CREATE TABLE "new_EnvironmentVersion" (
    "id" TEXT NOT NULL PRIMARY KEY,
    "accountId" TEXT NOT NULL,
    "environmentId" TEXT NOT NULL,
    "version" INTEGER NOT NULL,
    "repositories" JSONB NOT NULL,
    "variables" JSONB NOT NULL,
    "secretPaths" JSONB NOT NULL,
    "sealedSecretFiles" TEXT,
    "setupScript" TEXT NOT NULL,
    "services" JSONB NOT NULL DEFAULT '[]',
    "createdAt" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "EnvironmentVersion_accountId_fkey" FOREIGN KEY ("accountId") REFERENCES "Account" ("id") ON DELETE CASCADE ON UPDATE CASCADE,
    CONSTRAINT "EnvironmentVersion_environmentId_fkey" FOREIGN KEY ("environmentId") REFERENCES "Environment" ("id") ON DELETE CASCADE ON UPDATE CASCADE
);
INSERT INTO "new_EnvironmentVersion" ("accountId", "createdAt", "environmentId", "id", "repositories", "sealedSecretFiles", "secretPaths", "setupScript", "variables", "version") SELECT "accountId", "createdAt", "environmentId", "id", "repositories", "sealedSecretFiles", "secretPaths", "setupScript", "variables", "version" FROM "EnvironmentVersion";
DROP TABLE "EnvironmentVersion";
ALTER TABLE "new_EnvironmentVersion" RENAME TO "EnvironmentVersion";
CREATE INDEX "EnvironmentVersion_accountId_idx" ON "EnvironmentVersion"("accountId");
CREATE UNIQUE INDEX "EnvironmentVersion_environmentId_version_key" ON "EnvironmentVersion"("environmentId", "version");
CREATE TABLE "new_HostedService" (
    "id" TEXT NOT NULL PRIMARY KEY,
    "accountId" TEXT NOT NULL,
    "instanceId" TEXT NOT NULL,
    "name" TEXT NOT NULL,
    "port" INTEGER NOT NULL,
    "description" TEXT NOT NULL DEFAULT '',
    "key" TEXT NOT NULL,
    "access" TEXT NOT NULL DEFAULT 'account',
    "bytesIn" BIGINT NOT NULL DEFAULT 0,
    "bytesOut" BIGINT NOT NULL DEFAULT 0,
    "wakeOnRequest" BOOLEAN NOT NULL DEFAULT false,
    "idleStopMinutes" INTEGER,
    "lastRequestAt" DATETIME,
    "lastStatus" TEXT,
    "createdAt" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updatedAt" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "HostedService_accountId_fkey" FOREIGN KEY ("accountId") REFERENCES "Account" ("id") ON DELETE CASCADE ON UPDATE CASCADE,
    CONSTRAINT "HostedService_instanceId_fkey" FOREIGN KEY ("instanceId") REFERENCES "Instance" ("id") ON DELETE CASCADE ON UPDATE CASCADE
);
INSERT INTO "new_HostedService" ("access", "accountId", "bytesIn", "bytesOut", "createdAt", "description", "id", "instanceId", "key", "name", "port", "updatedAt") SELECT "access", "accountId", "bytesIn", "bytesOut", "createdAt", "description", "id", "instanceId", "key", "name", "port", "updatedAt" FROM "HostedService";
DROP TABLE "HostedService";
ALTER TABLE "new_HostedService" RENAME TO "HostedService";
CREATE UNIQUE INDEX "HostedService_key_key" ON "HostedService"("key");
CREATE INDEX "HostedService_accountId_idx" ON "HostedService"("accountId");
CREATE UNIQUE INDEX "HostedService_instanceId_name_key" ON "HostedService"("instanceId", "name");
PRAGMA foreign_keys=ON;
PRAGMA defer_foreign_keys=OFF;

-- CreateIndex
CREATE UNIQUE INDEX "ServiceCredential_tokenHash_key" ON "ServiceCredential"("tokenHash");

-- CreateIndex
CREATE INDEX "ServiceCredential_accountId_idx" ON "ServiceCredential"("accountId");

-- CreateIndex
CREATE INDEX "ServiceCredential_sessionId_idx" ON "ServiceCredential"("sessionId");

-- CreateIndex
CREATE INDEX "ServiceCredential_expiresAt_idx" ON "ServiceCredential"("expiresAt");
