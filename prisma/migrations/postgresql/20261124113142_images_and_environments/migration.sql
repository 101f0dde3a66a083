-- AlterTable
ALTER TABLE "Instance" ADD COLUMN     "components" JSONB,
ADD COLUMN     "imageId" TEXT;

-- CreateTable
CREATE TABLE "InstanceSetup" (
    "instanceId" TEXT NOT NULL,
    "accountId" TEXT NOT NULL,
    "steps" JSONB NOT NULL,
    "output" TEXT NOT NULL DEFAULT '',
    "outputTruncated" BOOLEAN NOT NULL DEFAULT false,
    "updatedAt" TIMESTAMP(3) NOT NULL,

    CONSTRAINT "InstanceSetup_pkey" PRIMARY KEY ("instanceId")
);

-- CreateTable
CREATE TABLE "Image" (
    "id" TEXT NOT NULL,
    "accountId" TEXT NOT NULL,
    "name" TEXT NOT NULL,
    "slug" TEXT NOT NULL,
    "baseImage" TEXT NOT NULL,
    "components" JSONB NOT NULL,
    "resources" JSONB,
    "buildStrategy" TEXT NOT NULL,
    "status" TEXT NOT NULL,
    "artifactKey" TEXT NOT NULL,
    "baseVersion" TEXT,
    "buildPackages" JSONB,
    "buildStep" TEXT,
    "buildProgress" INTEGER NOT NULL DEFAULT 0,
    "buildStartedAt" TIMESTAMP(3),
    "buildFinishedAt" TIMESTAMP(3),
    "buildError" TEXT,
    "buildLog" TEXT NOT NULL DEFAULT '',
    "buildLogTruncated" BOOLEAN NOT NULL DEFAULT false,
    "createdAt" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updatedAt" TIMESTAMP(3) NOT NULL,

    CONSTRAINT "Image_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "Environment" (
    "id" TEXT NOT NULL,
    "accountId" TEXT NOT NULL,
    "name" TEXT NOT NULL,
    "currentVersion" INTEGER NOT NULL,
    "createdAt" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updatedAt" TIMESTAMP(3) NOT NULL,

    CONSTRAINT "Environment_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "EnvironmentVersion" (
    "id" TEXT NOT NULL,
    "accountId" TEXT NOT NULL,
    "environmentId" TEXT NOT NULL,
    "version" INTEGER NOT NULL,
    "repositories" JSONB NOT NULL,
    "variables" JSONB NOT NULL,
    "secretPaths" JSONB NOT NULL,
    "sealedSecretFiles" TEXT,
    "setupScript" TEXT NOT NULL,
    "createdAt" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "EnvironmentVersion_pkey" PRIMARY KEY ("id")
);

-- CreateIndex
CREATE INDEX "Image_status_idx" ON "Image"("status");

-- CreateIndex
CREATE UNIQUE INDEX "Image_accountId_name_key" ON "Image"("accountId", "name");

-- CreateIndex
CREATE UNIQUE INDEX "Image_accountId_slug_key" ON "Image"("accountId", "slug");

-- CreateIndex
CREATE UNIQUE INDEX "Environment_accountId_name_key" ON "Environment"("accountId", "name");

-- CreateIndex
CREATE INDEX "EnvironmentVersion_accountId_idx" ON "EnvironmentVersion"("accountId");

-- CreateIndex
CREATE UNIQUE INDEX "EnvironmentVersion_environmentId_version_key" ON "EnvironmentVersion"("environmentId", "version");

-- CreateIndex
CREATE INDEX "Instance_imageId_idx" ON "Instance"("imageId");

-- AddForeignKey
ALTER TABLE "InstanceSetup" ADD CONSTRAINT "InstanceSetup_instanceId_fkey" FOREIGN KEY ("instanceId") REFERENCES "Instance"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "Image" ADD CONSTRAINT "Image_accountId_fkey" FOREIGN KEY ("accountId") REFERENCES "Account"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "Environment" ADD CONSTRAINT "Environment_accountId_fkey" FOREIGN KEY ("accountId") REFERENCES "Account"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "EnvironmentVersion" ADD CONSTRAINT "EnvironmentVersion_accountId_fkey" FOREIGN KEY ("accountId") REFERENCES "Account"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "EnvironmentVersion" ADD CONSTRAINT "EnvironmentVersion_environmentId_fkey" FOREIGN KEY ("environmentId") REFERENCES "Environment"("id") ON DELETE CASCADE ON UPDATE CASCADE;
