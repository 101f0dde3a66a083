-- CreateTable
CREATE TABLE "DesktopLink" (
    "id" TEXT NOT NULL PRIMARY KEY,
    "accountId" TEXT NOT NULL,
    "instanceId" TEXT NOT NULL,
    "tokenHash" TEXT NOT NULL,
    "createdAt" DATETIME NOT NULL,
    "expiresAt" DATETIME NOT NULL,
    "revokedAt" DATETIME,
    CONSTRAINT "DesktopLink_accountId_fkey" FOREIGN KEY ("accountId") REFERENCES "Account" ("id") ON DELETE CASCADE ON UPDATE CASCADE,
    CONSTRAINT "DesktopLink_instanceId_fkey" FOREIGN KEY ("instanceId") REFERENCES "Instance" ("id") ON DELETE CASCADE ON UPDATE CASCADE
);

-- CreateTable
CREATE TABLE "DesktopSession" (
    "id" TEXT NOT NULL PRIMARY KEY,
    "accountId" TEXT NOT NULL,
    "instanceId" TEXT NOT NULL,
    "linkId" TEXT NOT NULL,
    "credentialId" TEXT NOT NULL,
    "createdAt" DATETIME NOT NULL,
    "expiresAt" DATETIME NOT NULL,
    "endedAt" DATETIME,
    CONSTRAINT "DesktopSession_accountId_fkey" FOREIGN KEY ("accountId") REFERENCES "Account" ("id") ON DELETE CASCADE ON UPDATE CASCADE,
    CONSTRAINT "DesktopSession_instanceId_fkey" FOREIGN KEY ("instanceId") REFERENCES "Instance" ("id") ON DELETE CASCADE ON UPDATE CASCADE,
    CONSTRAINT "DesktopSession_linkId_fkey" FOREIGN KEY ("linkId") REFERENCES "DesktopLink" ("id") ON DELETE CASCADE ON UPDATE CASCADE
);

-- CreateIndex
CREATE UNIQUE INDEX "DesktopLink_tokenHash_key" ON "DesktopLink"("tokenHash");

-- CreateIndex
CREATE INDEX "DesktopLink_instanceId_idx" ON "DesktopLink"("instanceId");

-- CreateIndex
CREATE INDEX "DesktopSession_accountId_idx" ON "DesktopSession"("accountId");

-- CreateIndex
CREATE INDEX "DesktopSession_linkId_credentialId_idx" ON "DesktopSession"("linkId", "credentialId");
